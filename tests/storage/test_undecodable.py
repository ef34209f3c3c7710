"""Payloads and errors the app cannot decode: a popped job with one is marked, not
raised; burying it keeps its stored bytes; reads show it instead of failing."""

from __future__ import annotations

from storage_support import NOW

import lowkiq
from tests.leasing import batch as batch_number
from tests.leasing import pop, token

BAD = b"\xff{not json"


def test_pop_marks_the_job_whose_payload_cannot_be_decoded_and_decodes_the_others(worker, queue):
    worker.perform_async([{"id": "good", "payload": {"a": 1}, "score": 1, "perform_in": NOW - 2}])
    queue.push([("bad", b'"fine"', 1.0, NOW - 1, None), ("bad", BAD, 2.0, NOW - 1, None)])
    good, bad = pop(queue, 0, 10, now=NOW)
    assert (good.id, good.payloads, good.undecodable) == ("good", [{"a": 1}], None)
    assert (bad.id, bad.payloads) == ("bad", [])
    assert bad.undecodable.startswith("payload 2 of 2 cannot be decoded: UnicodeDecodeError")


def test_bury_moves_the_job_whole_to_the_morgue_with_its_bytes_and_error(worker, queue):
    queue.push([("bad", b'"fine"', 1.0, NOW - 1, None), ("bad", BAD, 2.0, NOW - 1, None)])
    worker.perform_async([{"id": "good", "payload": 1, "score": 1, "perform_in": NOW - 1}])
    batch = pop(queue, 0, 10, now=NOW)
    assert (
        queue.bury(0, token(queue, 0), batch_number(queue, 0), [("bad", "cannot decode")], now=NOW)
        == 1
    )
    [dead] = worker.queries().morgue_fetch(["bad"])
    assert dead["error"] == "cannot decode" and dead["updated_at"] == NOW
    assert dead["payloads"][0] == ["fine", 1.0]
    [undecodable, score] = dead["payloads"][1]
    assert isinstance(undecodable, lowkiq.Undecodable) and undecodable.raw == BAD
    assert score == 2.0
    # The rest of the batch is still in processing, to be acked or failed as usual.
    assert [job["id"] for job in worker.queries().processing_data()] == ["good"]
    assert {job.id for job in batch} == {"good", "bad"}
    metrics = worker.metrics()
    assert (metrics["failed"], metrics["morgue_length"], metrics["busy"]) == (1, 1, 1)


def test_reads_show_an_undecodable_payload_in_its_place(worker, queue):
    queue.push([("bad", BAD, 2.0, NOW, None)])
    [job] = worker.queries().fetch(["bad"])
    [[payload, score]] = job["payloads"]
    assert payload == lowkiq.Undecodable(BAD, payload.reason) and score == 2.0
    assert "UnicodeDecodeError" in payload.reason
    assert worker.queries().range_by_id("-", "+")[0]["id"] == "bad"


def test_reads_show_an_error_load_error_cannot_read_with_its_bytes(worker, queue, fail_batch):
    worker.perform_async([{"id": "a", "payload": 1, "perform_in": NOW - 1}])
    fail_batch(now=NOW, error="boom")

    def refuse(data: bytes) -> str:
        raise ValueError("not compressed")

    lowkiq.settings.load_error = refuse
    [job] = worker.queries().fetch(["a"])
    assert job["error"] == (
        "[this error cannot be decoded: ValueError: not compressed] raw bytes: b'boom'"
    )
