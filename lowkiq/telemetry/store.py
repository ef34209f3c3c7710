"""The metrics history in Redis: per queue, a hash per minute kept 72 hours, and all-time totals.

A process adds its counts with one ``history_add`` script call per queue and
minute, all in one pipelined round trip (:func:`add`); every call touches only
its queue's metrics keys (one hash tag, ``{name:metrics}``), so it works on
Redis Cluster.  Fields that would be 0 are not
written, so an idle minute costs nothing and a busy one a small hash (its
size is measured by ``bench/metrics_memory.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lowkiq.connection import Client
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.scripts import ScriptCall, Scripts, run_pipelined
from lowkiq.telemetry.counts import FIELDS, Counts

#: How long, seconds, a minute of history is kept after it ends.
RETENTION = 72 * 3600

#: A process's counts waiting to be written: ``(queue name, minute)`` -> counts list.
Rows = Mapping[tuple[str, int], Sequence[int]]


def add(client: Client, rows: Rows) -> None:
    """Add ``rows`` to the stored minutes and totals in one round trip."""
    if not rows:
        return
    script = Scripts.for_client(client).history_add
    calls: list[ScriptCall] = []
    for (queue_name, minute), values in rows.items():
        args: list[int | str] = [minute, (minute + 1) * 60 + RETENTION]
        for name, value in zip(FIELDS, values, strict=True):
            if value:
                args += (name, value)
        calls.append((script, [QueueKeys(queue_name).metrics_prefix], args))
    run_pipelined(client, calls)


def read_minutes(
    client: Client, queue_names: Sequence[str], first: int, last: int
) -> dict[str, dict[int, Counts]]:
    """The stored minutes ``first`` to ``last`` (inclusive) of each queue; absent minutes
    (nothing performed, or expired) are left out.  One pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for name in queue_names:
        keys = QueueKeys(name)
        for minute in range(first, last + 1):
            pipe.hgetall(keys.minute_hash(minute))
    replies = iter(pipe.execute())
    result: dict[str, dict[int, Counts]] = {}
    for name in queue_names:
        minutes = result[name] = {}
        for minute in range(first, last + 1):
            reply = next(replies)
            if reply:
                minutes[minute] = Counts.from_hash(reply)
    return result


def read_totals(client: Client, queue_names: Sequence[str]) -> dict[str, Counts]:
    """Each queue's counts since its first perform, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for name in queue_names:
        pipe.hgetall(QueueKeys(name).totals_hash)
    replies = pipe.execute()
    return {name: Counts.from_hash(reply) for name, reply in zip(queue_names, replies, strict=True)}
