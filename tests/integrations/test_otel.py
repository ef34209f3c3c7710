"""OpenTelemetry middlewares: spans by the messaging conventions (SDK in-memory exporter),
the trace context carried from enqueue to perform, perform's payloads unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import lowkiq
from lowkiq.integrations.otel import client_middleware, server_middleware
from lowkiq.testing import drain


class Orders(lowkiq.Worker):
    shards_count = 2
    batch_size = 10
    seen: list[dict[str, list[Any]]] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.seen.append(dict(payloads_by_id))
        if any("fail" in payloads for payloads in payloads_by_id.values()):
            raise KeyError("fail")


@dataclass
class Traced:
    exporter: InMemorySpanExporter
    provider: TracerProvider

    def spans(self, name: str) -> list[Any]:
        return [span for span in self.exporter.get_finished_spans() if span.name == name]


@pytest.fixture
def traced(redis_client: redis.Redis) -> Traced:
    """Both middlewares on an SDK tracer provider exporting to memory."""
    Orders.seen = []
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    lowkiq.settings.client_middlewares = [client_middleware(provider)]
    lowkiq.settings.server_middlewares = [server_middleware(provider)]
    return Traced(exporter, provider)


def test_the_trace_goes_from_enqueue_to_perform(traced: Traced) -> None:
    tracer = traced.provider.get_tracer("app")
    with tracer.start_as_current_span("request") as request:
        Orders.perform_async([{"id": "o1", "payload": {"status": "paid"}}])
    drain(Orders)

    assert Orders.seen == [{"o1": [{"status": "paid"}]}]  # no envelope reaches perform
    (send,) = traced.spans("send Orders")
    (process,) = traced.spans("process Orders")
    assert send.kind == SpanKind.PRODUCER and process.kind == SpanKind.CONSUMER
    assert send.parent.span_id == request.get_span_context().span_id
    assert process.parent.span_id == send.context.span_id
    assert process.context.trace_id == request.get_span_context().trace_id
    assert dict(send.attributes) == {
        "messaging.system": "lowkiq",
        "messaging.destination.name": "Orders",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    assert dict(process.attributes) == {
        "messaging.system": "lowkiq",
        "messaging.destination.name": "Orders",
        "messaging.destination.partition.id": str(Orders.queue().shard_of("o1")),
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
    }


def test_a_batch_of_several_sends_links_them_and_merges_equal_payloads(
    traced: Traced,
) -> None:
    tracer = traced.provider.get_tracer("app")
    same_shard = [i for i in map(str, range(20)) if Orders.queue().shard_of(i) == 0][:2]
    for trace_name in ("first", "second"):
        with tracer.start_as_current_span(trace_name):
            Orders.perform_async(
                [{"id": job_id, "payload": {"v": 1}, "score": 1} for job_id in same_shard]
            )
    # Stored apart: the envelopes differ.
    assert len(Orders.queries().fetch([same_shard[0]])[0]["payloads"]) == 2
    drain(Orders)

    # Equal payloads from two traces are one payload again, as without tracing.
    assert Orders.seen == [{job_id: [{"v": 1}] for job_id in same_shard}]
    sends = traced.spans("send Orders")
    assert [s.attributes["messaging.batch.message_count"] for s in sends] == [2, 2]
    (process,) = traced.spans("process Orders")
    assert process.parent is None
    assert {link.context.span_id for link in process.links} == {s.context.span_id for s in sends}
    assert process.attributes["messaging.batch.message_count"] == 2
    assert process.attributes["messaging.destination.partition.id"] == "0"


def test_a_failed_batch_has_an_error_type(traced: Traced) -> None:
    Orders.perform_async([{"id": "x", "payload": "fail"}])
    drain(Orders)
    (process,) = traced.spans("process Orders")
    assert process.status.status_code == StatusCode.ERROR
    assert process.attributes["error.type"] == "KeyError"
    assert Orders.queries().fetch(["x"])[0]["retry_count"] == 0


def test_without_a_tracer_payloads_are_stored_as_they_are(redis_client: redis.Redis) -> None:
    # The API's default no-op tracer: nothing to carry, no envelope.
    lowkiq.settings.client_middlewares = [client_middleware()]
    Orders.perform_async([{"id": "p", "payload": {"a": 1}}])
    assert Orders.queries().fetch(["p"])[0]["payloads"][0][0] == {"a": 1}
