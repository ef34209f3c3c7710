"""The last few minutes second by second: jobs processed and failed in each second, for
the dashboard's live chart (a burst reads at its real jobs per second, not as a
minute's average).

Per queue, one small hash per minute, ``lowkiq:{name:metrics}:second:<minute>``,
whose fields are the second in the minute and a letter (``"12p"``: processed in
second 12, ``"12f"``: failed); a count that would be 0 is not written.  Each
hash expires :data:`KEPT_MINUTES` minutes after its minute ends, so a queue
holds at most a dozen of them.  A process adds its counts with one ``HINCRBY``
per second and count it has, and one ``EXPIREAT`` per hash, in one pipelined
round trip (:func:`add`); the keys share the queue's metrics hash tag, so it
works on Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lowkiq.clients.connection import Client
from lowkiq.storage.keys import QueueKeys

#: Minutes a minute's per-second counts are kept after it ends.
KEPT_MINUTES = 10

# Positions in a second's counts list.
PROCESSED = 0  # jobs that succeeded
FAILED = 1  # jobs that failed (retried or killed)
SIZE = 2

#: The field letter of each position.
LETTERS = ("p", "f")

#: A process's per-second counts waiting to be written: ``(queue name, unix second)`` ->
#: counts list.
Rows = Mapping[tuple[str, int], Sequence[int]]


@dataclass(frozen=True)
class SecondCounts:
    """Jobs processed and failed in one second."""

    processed: int = 0
    failed: int = 0


def seconds_hash(queue_name: str, minute: int) -> str:
    """The hash of ``queue_name``'s per-second counts of ``minute`` (``unix time // 60``)."""
    return QueueKeys(queue_name).seconds_hash(minute)


def add(client: Client, rows: Rows) -> None:
    """Add ``rows`` to the stored seconds in one round trip."""
    if not rows:
        return
    pipe = client.pipeline(transaction=False)
    expiries: dict[str, int] = {}
    for (queue_name, second), values in rows.items():
        minute, offset = divmod(second, 60)
        key = seconds_hash(queue_name, minute)
        for letter, value in zip(LETTERS, values, strict=True):
            if value:
                pipe.hincrby(key, f"{offset}{letter}", value)
        expiries[key] = (minute + 1 + KEPT_MINUTES) * 60
    for key, at in expiries.items():
        pipe.expireat(key, at)
    pipe.execute()


def read(
    client: Client, queue_names: Sequence[str], first: int, last: int
) -> dict[int, dict[int, SecondCounts]]:
    """The per-second counts of minutes ``first`` to ``last`` (inclusive), every queue's
    summed: minute -> unix second -> counts.  A minute is left out when no queue has a
    hash for it (nothing done, expired, or written by no process that counts by
    second); seconds in which nothing was done are left out.  One round trip."""
    pipe = client.pipeline(transaction=False)
    for name in queue_names:
        for minute in range(first, last + 1):
            pipe.hgetall(seconds_hash(name, minute))
    replies = iter(pipe.execute())
    sums: dict[int, dict[int, list[int]]] = {}
    for _ in queue_names:
        for minute in range(first, last + 1):
            fields = next(replies)
            if not fields:
                continue
            seconds = sums.setdefault(minute, {})
            for name, value in fields.items():
                text = name.decode() if isinstance(name, bytes) else name
                if text[-1:] not in LETTERS or not text[:-1].isdigit():
                    continue  # not a field this version writes
                second = minute * 60 + int(text[:-1])
                seconds.setdefault(second, [0] * SIZE)[LETTERS.index(text[-1])] += int(value)
    return {
        minute: {second: SecondCounts(*values) for second, values in sorted(seconds.items())}
        for minute, seconds in sorted(sums.items())
    }
