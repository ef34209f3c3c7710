"""Helpers of the dashboard tests: the test workers, CSRF-aware POSTs, and jobs put
into the queue, the morgue or a processing area through the engine's own storage calls."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

import lowkiq
from tests.leasing import ack, fail, pop

ORIGIN = "http://localhost"
#: Where browser tests leave screenshots (besides docs/dashboard.png).
ARTIFACTS = Path(os.environ.get("LOWKIQ_TEST_ARTIFACTS", "test-artifacts"))
REPO = Path(__file__).resolve().parents[2]


class OrderWorker(lowkiq.Worker):
    """Three shards, batch size 10."""

    shards_count = 3
    batch_size = 10
    max_retry_count = 5


class MailWorker(lowkiq.Worker):
    """One shard."""

    shards_count = 1


def csrf_token(client: FlaskClient, prefix: str = "") -> str:
    """Load the dashboard once so the client holds the CSRF cookie; return the token."""
    assert client.get(prefix + "/").status_code == 200
    cookie = client.get_cookie("lowkiq_csrf", path=prefix + "/")
    assert cookie is not None, "the dashboard did not set the CSRF cookie"
    return cookie.value


def post(
    client: FlaskClient,
    url: str,
    data: dict[str, Any] | None = None,
    *,
    prefix: str = "",
    htmx: bool = True,
    origin: str | None = ORIGIN,
    token: str | None = None,
) -> Any:
    """A same-origin POST carrying the CSRF token, as the dashboard's own pages send it."""
    form = dict(data or {})
    form["csrf_token"] = csrf_token(client, prefix) if token is None else token
    headers = {"HX-Request": "true"} if htmx else {}
    if origin is not None:
        headers["Origin"] = origin
    return client.post(prefix + url, data=form, headers=headers)


#: A ``perform_in`` long past (2001-09-09): due at once, the earliest of any job.
LONG_AGO = 1_000_000_000.0


def enqueue(worker: type[lowkiq.Worker], count: int, prefix: str = "j", **fields: Any) -> list[str]:
    """Enqueue ``count`` jobs ``j0000``… (payload ``{"n": i}``); returns their ids.

    Unless ``perform_in`` is given they are due in an hour, so only jobs made due
    on purpose are popped by :func:`fail_all`, :func:`bury` and :func:`hold`.
    """
    fields.setdefault("perform_in", time.time() + 3600)
    ids = [f"{prefix}{i:04d}" for i in range(count)]
    worker.perform_async([{"id": i, "payload": {"n": n}, **fields} for n, i in enumerate(ids)])
    return ids


def fail_all(worker: type[lowkiq.Worker], error: str = "boom", max_retry_count: int = 5) -> int:
    """Pop every due job of every shard and fail it; ``max_retry_count=0`` buries them."""
    queue = worker.queue()
    failed = 0
    for shard in range(worker.shards_count):
        while batch := pop(queue, shard, 1000):
            fail(queue, shard, batch, error, lambda c: 3600.0, max_retry_count)
            failed += len(batch)
    return failed


def bury(worker: type[lowkiq.Worker], count: int, error: str = "boom") -> list[str]:
    """Put ``count`` jobs straight into the morgue; returns their ids."""
    ids = enqueue(worker, count, prefix="d", perform_in=LONG_AGO)
    fail_all(worker, error, max_retry_count=0)
    return ids


def hold(worker: type[lowkiq.Worker], shard: int = 0) -> list[str]:
    """Pop the due jobs of one shard into its processing area (busy) and leave them there."""
    batch = pop(worker.queue(), shard, 1000) or []
    return [job.id for job in batch]


def process(worker: type[lowkiq.Worker], count: int) -> None:
    """Pretend a server processed ``count`` due jobs (pop and ack)."""
    queue = worker.queue()
    done = 0
    for shard in range(worker.shards_count):
        while done < count and (batch := pop(queue, shard, count - done)):
            ack(queue, shard)
            done += len(batch)


def record_history(
    worker: type[lowkiq.Worker],
    at: float,
    batches: int,
    jobs: int = 1,
    seconds: float = 0.01,
    wait: float = 0.5,
    failed: bool = False,
    discarded: bool = False,
) -> None:
    """Store ``batches`` performed batches of ``jobs`` jobs each in ``worker``'s metrics
    history, as a worker process would: ``perform`` took ``seconds``, ending at ``at``, and each
    job had waited ``wait`` seconds; every job failed (``failed``), or was discarded
    (``discarded``).  Written through the engine's own recorder and flush."""
    from lowkiq.storage.queue import PoppedJob
    from lowkiq.telemetry.recorder import Recorder

    recorder = Recorder(lowkiq.settings.client(), [worker.queue_name], clock=lambda: at)
    started = at - seconds
    batch = [PoppedJob(f"h{n}", -1, ["p"], started - wait) for n in range(jobs)]
    for _ in range(batches):
        recorder.for_queue(worker.queue_name).performed(
            batch, started, jobs if failed else 0, jobs if discarded else 0
        )
    recorder.flush()
