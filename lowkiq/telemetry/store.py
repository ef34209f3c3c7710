"""The metrics history in Redis: per queue, a hash per minute, per ten minutes and per hour,
kept 72 hours, and all-time totals.

A process adds its counts with one ``history_add`` script call per queue and
minute, all in one pipelined round trip (:func:`add`); the script adds them to
the hashes of the minute, of its ten minutes and of its hour (so a long window
is read ten minutes or an hour at a time), and to the totals. Every call
touches only its queue's metrics keys (one hash tag, ``{name:metrics}``), so it
works on Redis Cluster. Fields that would be 0 are not written, so an idle
minute costs nothing and a busy one a small hash (its size is measured by
``bench/metrics_memory.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lowkiq.clients.connection import Client
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.scripts import ScriptCall, Scripts, run_pipelined
from lowkiq.telemetry.counts import FIELDS, Counts

#: How long, seconds, a minute (an hour) of history is kept after it ends.
RETENTION = 72 * 3600

#: A process's counts waiting to be written: ``(queue name, minute)`` -> counts list.
Rows = Mapping[tuple[str, int], Sequence[int]]


def add(client: Client, rows: Rows) -> None:
    """Add ``rows`` to the stored minutes, hours and totals in one round trip."""
    if not rows:
        return
    script = Scripts.for_client(client).history_add
    calls: list[ScriptCall] = []
    for (queue_name, minute), values in rows.items():
        args: list[int | str] = [minute, RETENTION]
        for name, value in zip(FIELDS, values, strict=True):
            if value:
                args += (name, value)
        calls.append((script, [QueueKeys(queue_name).metrics_prefix], args))
    run_pipelined(client, calls)


def _counts(reply: Sequence[bytes | None]) -> Counts:
    return Counts(tuple(int(value) if value else 0 for value in reply))


def read_spans(
    client: Client, queue_names: Sequence[str], minutes: int, first: int, last: int
) -> dict[str, dict[int, Counts]]:
    """Each queue's stored spans of ``minutes`` minutes (1, 10 or 60) numbered ``first``
    to ``last`` (inclusive), by number; absent ones (nothing performed, or expired)
    are left out.  One pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for name in queue_names:
        keys = QueueKeys(name)
        for number in range(first, last + 1):
            pipe.hmget(keys.span_hash(minutes, number), FIELDS)
    replies = iter(pipe.execute())
    result: dict[str, dict[int, Counts]] = {}
    for name in queue_names:
        spans = result[name] = {}
        for number in range(first, last + 1):
            reply = next(replies)
            if any(reply):
                spans[number] = _counts(reply)
    return result


def read_totals(client: Client, queue_names: Sequence[str]) -> dict[str, Counts]:
    """Each queue's counts since its first perform, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for name in queue_names:
        pipe.hmget(QueueKeys(name).totals_hash, FIELDS)
    return {name: _counts(reply) for name, reply in zip(queue_names, pipe.execute(), strict=True)}
