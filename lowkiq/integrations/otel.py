"""OpenTelemetry tracing of enqueue and perform (lowkiq's ``[otel]`` extra).

Two middlewares following OpenTelemetry's messaging conventions
(``messaging.system = "lowkiq"``):

* :func:`client_middleware` wraps ``perform_async`` in a ``send {queue}``
  PRODUCER span and carries that span's context (W3C ``traceparent``, through
  the globally configured propagator) in each job's payload envelope;
* :func:`server_middleware` wraps each batch in a ``process {queue}`` CONSUMER
  span, child of the producer's span when the batch came from one ``send``, else
  linked to every producer span; it takes the envelopes off again, so
  ``perform`` receives exactly the payloads it would receive without tracing.

An envelope is ``{"__lowkiq_trace__": carrier, "payload": payload}``; with no
tracer configured (an empty carrier) payloads are stored as they are.  Equal
payloads sent from different traces are different bytes in Redis until the
batch runs: the server middleware merges them again (the oldest kept, as
storage does), so only the stored size and the dashboard show the envelope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import propagate, trace
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "lowkiq.integrations.otel needs OpenTelemetry's API: install lowkiq with its [otel] "
        "extra (pip install '<lowkiq>[otel]', <lowkiq> being your clone or lowkiq's git URL), "
        "or opentelemetry-api"
    ) from exc

from lowkiq.middleware import Batch, ClientMiddleware, Next, ServerMiddleware
from lowkiq.running import batch_of
from lowkiq.settings import settings
from lowkiq.version import __version__

if TYPE_CHECKING:
    from lowkiq.worker import Worker

#: The envelope's key for the trace context carrier.
TRACE_KEY = "__lowkiq_trace__"
SYSTEM = "lowkiq"


def _tracer(tracer_provider: trace.TracerProvider | None) -> trace.Tracer:
    return trace.get_tracer("lowkiq", __version__, tracer_provider=tracer_provider)


def _error_type(span: trace.Span, exc: BaseException) -> None:
    span.set_attribute("error.type", type(exc).__qualname__)


def client_middleware(tracer_provider: trace.TracerProvider | None = None) -> ClientMiddleware:
    """A client middleware: a ``send {queue}`` span around ``perform_async``, its context
    in every job's payload envelope (``tracer_provider``: default the global one)."""
    tracer = _tracer(tracer_provider)

    def send(
        worker: type[Worker], jobs: Sequence[dict[str, Any]], call_next: Next[Any, Any]
    ) -> Any:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": worker.queue_name,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if len(jobs) != 1:
            attributes["messaging.batch.message_count"] = len(jobs)
        with tracer.start_as_current_span(
            f"send {worker.queue_name}", kind=trace.SpanKind.PRODUCER, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            try:
                return call_next(worker, _wrapped(jobs, carrier) if carrier else jobs)
            except Exception as exc:
                _error_type(span, exc)
                raise

    return send


def _wrapped(jobs: Sequence[dict[str, Any]], carrier: dict[str, str]) -> list[Any]:
    """``jobs`` with each payload in an envelope; anything that is not a job dict is left
    for validation to name."""
    return [
        {**job, "payload": {TRACE_KEY: carrier, "payload": job.get("payload", "")}}
        if isinstance(job, dict)
        else job
        for job in jobs
    ]


def is_envelope(payload: Any) -> bool:
    """Whether ``payload`` is a tracing envelope made by :func:`client_middleware`."""
    return (
        isinstance(payload, dict)
        and len(payload) == 2
        and TRACE_KEY in payload
        and "payload" in payload
        and isinstance(payload[TRACE_KEY], dict)
    )


def unwrap(batch: Batch) -> tuple[Batch, list[dict[str, str]]]:
    """The batch without envelopes, equal payloads merged again (the first, oldest, kept),
    and the distinct trace carriers found, in order."""
    carriers: list[dict[str, str]] = []
    plain: Batch = {}
    for job_id, payloads in batch.items():
        if not any(is_envelope(p) for p in payloads):
            plain[job_id] = payloads
            continue
        kept: list[Any] = []
        seen: set[bytes | str] = set()
        for payload in payloads:
            if is_envelope(payload):
                if payload[TRACE_KEY] not in carriers:
                    carriers.append(payload[TRACE_KEY])
                payload = payload["payload"]
            key = settings.dump_payload(payload)
            if key not in seen:
                seen.add(key)
                kept.append(payload)
        plain[job_id] = kept
    return plain, carriers


def server_middleware(tracer_provider: trace.TracerProvider | None = None) -> ServerMiddleware:
    """A server middleware: a ``process {queue}`` span around each batch, child of or
    linked to the producers' spans; ``perform`` gets the payloads without envelopes."""
    tracer = _tracer(tracer_provider)

    def process(worker: type[Worker], batch: Batch, call_next: Next[Any, Any]) -> Any:
        plain, carriers = unwrap(batch)
        running = batch_of(worker, batch)
        contexts = [propagate.extract(carrier) for carrier in carriers]
        span_contexts = [trace.get_current_span(c).get_span_context() for c in contexts]
        valid = [(c, s) for c, s in zip(contexts, span_contexts, strict=True) if s.is_valid]
        parent = valid[0][0] if len(valid) == 1 else None
        links = [trace.Link(s) for _, s in valid] if len(valid) > 1 else []
        messages = sum(len(payloads) for payloads in plain.values())
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": worker.queue_name,
            "messaging.destination.partition.id": str(running.shard),
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
        }
        if messages != 1:
            attributes["messaging.batch.message_count"] = messages
        with tracer.start_as_current_span(
            f"process {worker.queue_name}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        ) as span:
            try:
                return call_next(worker, plain)
            except Exception as exc:
                _error_type(span, exc)
                raise

    return process
