"""The job events of a tracked worker (``Worker.track``), read back.

Each shard's scripts append one entry per job event to the shard's events stream
(``S events`` in :mod:`lowkiq.storage.keys`), in the script that makes the change, so
an event is recorded exactly when its change is.  The stream is capped at about
``Worker.track_length`` entries (``XADD MAXLEN ~``): the oldest events go first.

Events: ``enqueued`` (``perform_in``; ``merged`` 1 when a job of that id was queued;
``from`` ``morgue``, ``schedule`` or another queue's name when it did not come from an
enqueue; ``once``, a push made once: ``wf:<workflow id>:<opened at>:<complete|success>``
a workflow's callback, ``held:<call>:<id>`` a job held ``after=`` workflows),
``popped``, ``done``, ``failed`` (``retry_count``,
``perform_in`` of the retry, ``error``), ``yielded`` (``left``: payloads given back),
``discarded``, ``snoozed`` (``perform_in``: due again then), ``buried`` (moved to the
morgue; ``error``), ``restored`` (its process
died or stopped running it: back in the queue), ``deleted`` (``from`` ``queue`` or
``morgue``; ``by`` ``cancel`` when a cancel deleted it), ``cancelled`` (its running
batch was cancelled: settled, not failed) and ``moved`` (``to``: the queue it moved
to).  Events of a batch carry the lease it ran under: :attr:`JobEvent.fence` and
:attr:`JobEvent.process`.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lowkiq.storage.queue import Queue

#: Entries one read asks of a stream.
READ_COUNT = 1000


@dataclass(frozen=True)
class JobEvent:
    """One event of one job, as its shard's events stream recorded it."""

    #: The job's id.
    id: str
    #: What happened: ``enqueued``, ``popped``, ``done``, ``failed``, ``yielded``,
    #: ``discarded``, ``snoozed``, ``buried``, ``restored``, ``deleted``, ``cancelled`` or
    #: ``moved``.
    event: str
    #: When, Unix seconds on Redis's clock (milliseconds).
    at: float
    #: The queue (worker) and shard it happened in.
    queue: str
    shard: int
    #: The fencing token of the lease a batch ran under (``None``: not a batch's event).
    fence: int | None = None
    #: The process that held that lease.
    process: str | None = None
    #: The event's other fields (``perform_in``, ``error``, ``retry_count``, ...).
    details: dict[str, str] = field(default_factory=dict)
    #: The stream entry's id (``ms-seq``).
    entry: str = ""


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _key(entry: str) -> tuple[int, int]:
    ms, _, seq = entry.partition("-")
    return int(ms), int(seq or 0)


def _ids(value: Any) -> list[str]:
    """The ids of an entry's field (joined by NUL), as text."""
    return _text(value).split("\0") if value else []


def _events(
    queue: str, shard: int, entry: Any, fields: dict[Any, Any], only: str | None = None
) -> list[JobEvent]:
    """The events of one stream entry (of the id ``only``, when given): one per id it
    names (a batch's ``popped`` and ``done``, an enqueue's ``enqueued``, a clear's
    ``deleted`` name every id, joined by NUL; an ``enqueued`` entry's ``merged`` names
    those merged onto a queued job).  A pop that acked the shard's previous batch
    records its ``done`` and, in ``popped``, the ids it took, in one entry."""
    raw = {_text(k): v for k, v in fields.items()}
    ids, popped = _ids(raw.pop("id", "")), _ids(raw.pop("popped", ""))
    if only is not None:
        ids, popped = [i for i in ids if i == only], [i for i in popped if i == only]
        if not ids and not popped:
            return []
    details = {k: _text(v) for k, v in raw.items()}
    name = details.pop("event", "")
    fence = process = None
    token = details.pop("fence", None)
    if token:
        epoch, _, process = token.partition(" ")
        fence = int(epoch) if epoch.isdigit() else None
    merged = details.pop("merged", None)
    merged_ids = set(merged.split("\0")) if merged else set()
    entry = _text(entry)
    at = _key(entry)[0] / 1000

    def event(job_id: str, event_name: str, own: dict[str, str]) -> JobEvent:
        return JobEvent(job_id, event_name, at, queue, shard, fence, process or None, own, entry)

    events = []
    for job_id in ids:
        own = dict(details)  # each event its own details
        if merged is not None:
            own["merged"] = str(int(job_id in merged_ids))
        events.append(event(job_id, name, own))
    events += [event(job_id, "popped", {}) for job_id in popped]
    return events


def _read(
    queue: Queue, after: dict[int, str], only: str | None = None
) -> dict[int, tuple[list[JobEvent], str | None, int]]:
    """The events (of the id ``only``, when given) of up to :data:`READ_COUNT` entries
    of each shard of ``after`` that come after the entry id it gives (``(ms-seq``, or
    ``-`` for the first kept), in one round trip: per shard, the events, the last
    entry's id and how many entries were read."""
    pipe = queue.client.pipeline(transaction=False)
    shards = list(after)
    for shard in shards:
        pipe.xrange(queue.keys.events_stream(shard), after[shard], "+", count=READ_COUNT)
    read: dict[int, tuple[list[JobEvent], str | None, int]] = {}
    for shard, entries in zip(shards, pipe.execute(), strict=True):
        events = [
            event
            for entry, fields in entries
            for event in _events(queue.name, shard, entry, fields, only)
        ]
        last = _text(entries[-1][0]) if entries else None
        read[shard] = (events, last, len(entries))
    return read


def _drain(queue: Queue, after: dict[int, str], only: str | None = None) -> list[list[JobEvent]]:
    """Every event (of the id ``only``, when given) after ``after`` (updated in place)
    of each shard, oldest first."""
    found: dict[int, list[JobEvent]] = {shard: [] for shard in after}
    pending = dict(after)
    while pending:
        for shard, (events, last, count) in _read(queue, pending, only).items():
            found[shard].extend(events)
            if last is not None:
                after[shard] = pending[shard] = "(" + last
            if count < READ_COUNT:
                del pending[shard]
    return list(found.values())


def job_history(queue: Queue, job_id: str) -> list[JobEvent]:
    """The kept events of ``job_id``, oldest first (its shard's stream, read whole; only
    the entries naming it become events)."""
    (events,) = _drain(queue, {queue.shard_of(job_id): "-"}, job_id)
    return events


def queue_events(
    queue: Queue, since: float | None = None, follow: bool = False, poll: float = 0.5
) -> Iterator[JobEvent]:
    """The kept events of every shard of ``queue`` (from ``since``, Unix seconds, when
    given) in time order; with ``follow``, then each new event as it comes (read every
    ``poll`` seconds), without end."""
    start = "-" if since is None else str(max(0, math.ceil(round(since * 1000, 3))))
    after = dict.fromkeys(queue.shards, start)
    while True:
        yield from _merged(_drain(queue, after))
        if not follow:
            return
        time.sleep(poll)


def _merged(per_shard: Iterable[list[JobEvent]]) -> Iterator[JobEvent]:
    """Events of several shards, each oldest first, in one time order."""
    return heapq.merge(*per_shard, key=lambda event: (_key(event.entry), event.shard))
