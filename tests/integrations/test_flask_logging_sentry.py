"""The Flask, logging and Sentry middlewares, around batches performed by drain()."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis
import sentry_sdk
from flask import Flask, current_app, g
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import lowkiq
from lowkiq.integrations.batch_logging import BatchFields, log_batches
from lowkiq.integrations.flask import app_context
from lowkiq.integrations.sentry import report_failures
from lowkiq.testing import drain

log = logging.getLogger("tests.integrations.orders")


class Orders(lowkiq.Worker):
    shards_count = 2
    batch_size = 3
    seen: list[dict[str, Any]] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        log.info("performing %d", len(payloads_by_id))
        if _has_app():
            cls.seen.append(
                {"app": current_app.name, "g_before": g.get("n"), "ids": payloads_by_id}
            )
            g.n = len(payloads_by_id)
        else:
            cls.seen.append({"ids": payloads_by_id})
        if any("fail" in payloads for payloads in payloads_by_id.values()):
            raise ValueError("bad order")


def _has_app() -> bool:
    from flask import has_app_context

    return has_app_context()


@pytest.fixture(autouse=True)
def clean(redis_client: redis.Redis) -> None:
    Orders.seen = []


def ids_in_two_shards() -> list[str]:
    ids = [str(n) for n in range(10)]
    shards = {Orders.queue().shard_of(job_id) for job_id in ids}
    assert shards == {0, 1}
    return ids


def test_each_batch_runs_in_its_own_app_context() -> None:
    app = Flask("orders_app")
    torn_down: list[BaseException | None] = []
    app.teardown_appcontext(torn_down.append)
    lowkiq.settings.server_middlewares = [app_context(app)]
    Orders.perform_async([{"id": job_id} for job_id in ids_in_two_shards()])
    Orders.perform_async([{"id": "f", "payload": "fail"}])

    drained = drain(Orders)
    assert drained.batches == len(Orders.seen) == len(torn_down) >= 4
    assert all(seen["app"] == "orders_app" for seen in Orders.seen)
    assert all(seen["g_before"] is None for seen in Orders.seen)  # g is per batch
    assert [type(exc) for exc in torn_down if exc is not None] == [ValueError]
    assert not _has_app()


def test_batches_log_with_their_worker_shard_and_ids(caplog: pytest.LogCaptureFixture) -> None:
    caplog.handler.addFilter(BatchFields())
    lowkiq.settings.server_middlewares = [log_batches()]
    Orders.perform_async([{"id": "a"}, {"id": "f", "payload": "fail"}])
    caplog.set_level(logging.INFO)
    drain(Orders)

    shard_a, shard_f = Orders.queue().shard_of("a"), Orders.queue().shard_of("f")
    assert shard_a != shard_f
    by_outcome = {r.lowkiq_outcome: r for r in caplog.records if r.name == "lowkiq.batches"}
    done, failed = by_outcome["done"], by_outcome["failed"]
    assert (done.lowkiq_worker, done.lowkiq_shard, done.lowkiq_ids) == ("Orders", shard_a, ["a"])
    assert (failed.lowkiq_shard, failed.lowkiq_ids) == (shard_f, ["f"])
    assert failed.lowkiq_queue == "Orders" and failed.lowkiq_duration >= 0
    assert f"Orders:{shard_f}: batch of 1 job(s) failed" in failed.getMessage()

    # The worker's own records, stamped by the filter while the batch ran.
    own = [r for r in caplog.records if r.name == log.name]
    assert sorted(r.lowkiq_ids[0] for r in own) == ["a", "f"]
    assert all(r.lowkiq_worker == "Orders" for r in own)
    # lowkiq's warning about the failed batch carries the fields as well.
    (warning,) = [r for r in caplog.records if r.name == "lowkiq.shard_handler"]
    assert (warning.lowkiq_shard, warning.lowkiq_ids) == (shard_f, ["f"])
    # Outside a batch the filter adds nothing.
    log.info("after")
    assert not hasattr(caplog.records[-1], "lowkiq_worker")


class Captured(Transport):
    """A Sentry transport that keeps the envelopes instead of sending them."""

    envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)


@pytest.fixture
def sentry_events() -> Any:
    Captured.envelopes = []
    sentry_sdk.init(dsn="http://key@127.0.0.1:9/1", transport=Captured, default_integrations=False)
    try:
        yield lambda: [e.get_event() for e in Captured.envelopes if e.get_event() is not None]
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.init()


def test_a_failed_batch_is_reported_to_sentry_with_ids_and_retry_counts(sentry_events) -> None:
    lowkiq.settings.server_middlewares = [report_failures]
    Orders.perform_async([{"id": "ok"}, {"id": "f", "payload": "fail"}])
    drained = drain(Orders)
    assert drained.failed == 1 and drained.performed == 1
    drain(Orders, future=True)  # the retry fails again

    events = sentry_events()
    assert len(events) == 2
    for event in events:
        (exception,) = event["exception"]["values"]
        assert (exception["type"], exception["value"]) == ("ValueError", "bad order")
        assert event["tags"]["lowkiq.worker"] == "Orders"
        assert event["tags"]["lowkiq.shard"] == str(Orders.queue().shard_of("f"))
        assert event["contexts"]["lowkiq"]["ids"] == ["f"]
    assert [e["contexts"]["lowkiq"]["retry_counts"] for e in events] == [{"f": -1}, {"f": 0}]
    assert Orders.queries().fetch(["f"])[0]["retry_count"] == 1  # the retry rules still ran
