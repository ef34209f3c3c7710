"""Payload and error serializers (SPEC §3 canonical JSON, §6 custom serializers)."""

from __future__ import annotations

import ast
import json
import zlib

import pytest

import lowkiq
from lowkiq.errors import InvalidJob
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.serializers import dump_json, load_json
from tests.leasing import fail, pop, token
from tests.runtime.serving import process

NOW = 1_700_000_000.0


@pytest.fixture
def worker(redis_client):
    class OrderWorker(lowkiq.Worker):
        shards_count = 1
        batch_size = 10
        max_retry_count = 1

    return OrderWorker


def test_default_json_is_canonical():
    first = {"b": {"d": 1, "c": [{"z": 1, "y": 2}]}, "a": "é"}
    second = {"a": "é", "b": {"c": [{"y": 2, "z": 1}], "d": 1}}
    assert dump_json(first) == dump_json(second)
    assert (
        dump_json(first)
        == json.dumps(first, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )
    assert dump_json({"b": 2, "a": 1}) == b'{"a":1,"b":2}'
    assert load_json(dump_json(first)) == first


@pytest.mark.parametrize("payload", ["text", 1, 1.5, None, True, [1, "a"], {"k": [None]}])
def test_default_json_round_trips(payload):
    assert load_json(dump_json(payload)) == payload


@pytest.mark.parametrize("payload", [{1, 2}, object(), float("nan"), b"raw"])
def test_default_json_rejects_what_json_cannot_carry(payload):
    with pytest.raises((TypeError, ValueError)):
        dump_json(payload)


def repr_dump(payload):
    """A pickle-free codec that carries tuples and sets: Python literals."""
    if isinstance(payload, set):
        return "set:" + repr(sorted(payload))
    return repr(payload)


def repr_load(data):
    text = data.decode()
    if text.startswith("set:"):
        return set(ast.literal_eval(text[4:]))
    return ast.literal_eval(text)


def test_custom_payload_serializer_is_used_to_store_and_load(worker, redis_client):
    lowkiq.settings.dump_payload = repr_dump
    lowkiq.settings.load_payload = repr_load
    worker.perform_async(
        [
            {"id": 1, "payload": (1, "tuple"), "score": 1, "perform_in": NOW},
            {"id": 1, "payload": {3, 2, 1}, "score": 2, "perform_in": NOW},
            {"id": 1, "payload": {1, 2, 3}, "score": 3, "perform_in": NOW},
        ]
    )
    [job] = worker.queries().fetch([1])
    assert job["payloads"] == [[(1, "tuple"), 1.0], [{1, 2, 3}, 2.0]]
    [popped] = pop(worker.queue(), 0, 10, now=NOW)
    assert popped.payloads == [(1, "tuple"), {1, 2, 3}]
    assert worker.queries().processing_data()[0]["payloads"][1] == [{1, 2, 3}, 2.0]
    raw = b"".join(redis_client.hvals(worker.queue().keys.processing_hash(0)))
    assert b"(1, 'tuple')" in raw


def test_custom_payload_serializer_rejection_is_an_invalid_job(worker, redis_client):
    def only_str(payload):
        if not isinstance(payload, str):
            raise TypeError("only text")
        return payload.encode()

    lowkiq.settings.dump_payload = only_str
    with pytest.raises(InvalidJob, match="only text") as caught:
        worker.perform_async([{"id": 1, "payload": "ok"}, {"id": 2, "payload": 2}])
    assert (caught.value.index, caught.value.field) == (1, "payload")
    assert redis_client.dbsize() == 0


def test_custom_payload_serializer_decides_which_payloads_merge(worker):
    lowkiq.settings.dump_payload = lambda payload: str(payload).lower()
    lowkiq.settings.load_payload = lambda data: data.decode()
    worker.perform_async(
        [{"id": 1, "payload": "ABC", "score": 2}, {"id": 1, "payload": "abc", "score": 1}]
    )
    [job] = worker.queries().fetch([1])
    assert job["payloads"] == [["abc", 1.0]]


def test_dump_error_and_load_error_wrap_stored_errors(worker, redis_client):
    lowkiq.settings.dump_error = lambda text: zlib.compress(text.encode())
    lowkiq.settings.load_error = lambda data: zlib.decompress(data).decode()
    text = "Traceback (most recent call last):\n" + "  frame\n" * 50 + "ValueError: bad"
    queue = worker.queue()
    worker.perform_async([{"id": "a", "perform_in": NOW}, {"id": "b", "perform_in": NOW}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), text, lambda c: 10, 1, now=NOW)

    stored = redis_client.hget(queue.keys.errors_hash(0), "a")
    assert stored == zlib.compress(text.encode())
    assert [job["error"] for job in worker.queries().fetch(["a"])] == [text]

    batch = pop(queue, 0, 1, now=NOW + 100)
    assert [job["error"] for job in worker.queries().processing_data()] == [text]
    dead = fail(queue, 0, batch, text, lambda c: 1, 1, now=NOW + 100)
    assert [job["error"] for job in dead] == [text]
    assert [job["error"] for job in worker.queries().morgue_fetch(["a", "b"])] == [text]


def test_default_format_error_is_class_and_message(redis_client):
    assert lowkiq.settings.format_error(ValueError("bad value")) == "ValueError: bad value"


def test_format_error_decides_the_stored_error_text(worker):
    def perform(cls, payloads_by_id):
        raise KeyError("missing")

    worker.perform = classmethod(perform)
    lowkiq.settings.format_error = lambda exc: f"{type(exc).__name__}: {exc}"
    worker.perform_async([{"id": "a"}])
    queue = worker.queue()
    handler = ShardHandler(
        worker, 0, queue, token(queue, 0), format_error=lowkiq.settings.format_error
    )
    assert process(handler) is True
    [job] = worker.queries().fetch(["a"])
    assert job["error"] == "KeyError: 'missing'"
    assert job["retry_count"] == 0
