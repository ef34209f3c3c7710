"""The wait of each job from due to start, per group: Prometheus
``lowkiq_group_wait_seconds`` (labels ``worker``, ``group``), for the groups with the
most jobs and ``other``.

Each processing thread's tally of a worker (:class:`lowkiq.telemetry.recorder.WorkerTally`)
counts its batches' waits by group in a :class:`GroupWaits`, for at most
:data:`INTERVAL_FACTOR` times ``settings.metrics_top_groups`` groups a flush interval (the
rest as ``other``).  Every flush of the process adds them to Redis with one script call
per worker (``lua/group_waits_add.lua``), which keeps a histogram of its own for at most
``metrics_top_groups`` groups, those with the most jobs (halved every hour), and adds the
others' to ``other``: the metric's cardinality is bounded whatever the number of groups.
A scrape reads them back (:func:`families`).  Jobs without a group are the group ``""``
(``lowkiq_queue_wait_seconds`` counts every job of the worker).

The processing thread alone writes its tally's current counts; the flush thread asks for
them (:meth:`GroupWaits.take`) and the thread hands them over at its next batch, so no
count is lost and the hot path takes no lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import HistogramMetricFamily

from lowkiq.clients.connection import Client
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.scripts import ScriptCall, Scripts, run_pipelined
from lowkiq.telemetry.counts import BUCKETS, SLOTS

#: The name the waits of the groups not kept apart are stored under (a group has no NUL).
OTHER = "\0other"
#: Their ``group`` label.
OTHER_LABEL = "other"
#: A tally keeps apart, in one flush interval, this many times the setting's groups.
INTERVAL_FACTOR = 4

#: One group's counts: ``SLOTS`` bucket counts, then the seconds waited, summed.
Histogram = list[float]


class GroupWaits:
    """One processing thread's waits of one worker, by group (see the module)."""

    __slots__ = ("current", "handed", "limit", "_asked")

    def __init__(self, limit: int) -> None:
        #: Groups counted apart in a flush interval (then the others as :data:`OTHER`).
        self.limit = limit * INTERVAL_FACTOR
        #: The counts since the last hand-over: group -> histogram.
        self.current: dict[str, Histogram] = {}
        #: The counts handed over, for the flush thread.
        self.handed: deque[dict[str, Histogram]] = deque()
        self._asked = False

    def counts(self) -> dict[str, Histogram]:
        """The current counts by group, which the processing thread adds a batch's waits
        to (a group without counts yet: :meth:`histogram`), handed over first when the
        flush thread asked for them."""
        if self._asked:
            self._asked = False
            self.handed.append(self.current)
            self.current = {}
        return self.current

    def histogram(self, group: str) -> Histogram:
        """The current counts of ``group``, made at its first job; past the interval's
        limit of groups, those of :data:`OTHER`."""
        current = self.current
        if len(current) >= self.limit:
            group = OTHER
        counts = current.get(group)
        if counts is None:
            counts = current[group] = [0.0] * (SLOTS + 1)
        return counts

    def take(self, everything: bool = False) -> list[dict[str, Histogram]]:
        """The counts handed over since the last call (the flush thread), and ask for the
        current ones at the thread's next batch; ``everything``: the thread has stopped,
        its current counts too."""
        taken = []
        while self.handed:
            taken.append(self.handed.popleft())
        if everything:
            taken.append(self.current)
            self.current = {}
        elif self.current:
            self._asked = True
        return taken


def merge(parts: Iterable[Mapping[str, Histogram]]) -> dict[str, Histogram]:
    """Several tallies' counts of one worker, summed by group."""
    total: dict[str, Histogram] = {}
    for part in parts:
        for group, counts in part.items():
            mine = total.get(group)
            if mine is None:
                total[group] = list(counts)
            else:
                for i, value in enumerate(counts):
                    mine[i] += value
    return total


def add(client: Client, by_queue: Mapping[str, Mapping[str, Histogram]], limit: int) -> None:
    """Add each queue's waits by group to Redis, keeping ``limit`` groups apart per
    queue (one pipelined round trip)."""
    if not by_queue:
        return
    script = Scripts.for_client(client).group_waits_add
    seconds, micros = client.time()
    now = seconds + micros / 1e6
    calls: list[ScriptCall] = []
    for queue_name, groups in by_queue.items():
        args: list[object] = [limit, SLOTS, repr(now)]
        for group, counts in groups.items():
            jobs = int(sum(counts[:SLOTS]))
            if jobs:
                args += [group, jobs, repr(counts[SLOTS]), *(int(c) for c in counts[:SLOTS])]
        if len(args) > 3:
            calls.append((script, [QueueKeys(queue_name).metrics_prefix], args))
    if calls:
        run_pipelined(client, calls)


def _key(queue_name: str) -> str:
    return QueueKeys(queue_name).metrics_prefix + "group_waits"


def read(client: Client, queue_names: Sequence[str]) -> list[dict[str, Histogram]]:
    """Each queue's stored histograms: group (``OTHER``: the rest) -> counts."""
    pipe = client.pipeline(transaction=False)
    for name in queue_names:
        pipe.hgetall(_key(name))
    found = []
    for fields in pipe.execute():
        groups: dict[str, Histogram] = {}
        for raw_field, raw_value in fields.items():
            field = raw_field.decode() if isinstance(raw_field, bytes) else raw_field
            group, _, slot = field.rpartition("\0")
            counts = groups.setdefault(group, [0.0] * (SLOTS + 1))
            counts[SLOTS if slot == "sum" else int(slot)] = float(raw_value)
        found.append(groups)
    return found


def _cumulative(counts: Histogram) -> list[tuple[str, float]]:
    pairs, seen = [], 0.0
    for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts[:SLOTS], strict=True):
        seen += count
        pairs.append((bound, seen))
    return pairs


def families(client: Client, workers: Mapping[str, str]) -> Iterator[HistogramMetricFamily]:
    """The ``lowkiq_group_wait_seconds`` family of ``workers`` (worker name -> queue
    name), read from Redis in one round trip."""
    family = HistogramMetricFamily(
        "lowkiq_group_wait_seconds",
        "Perform start minus the job's perform_in, per job, by group: the groups with the "
        'most jobs (settings.metrics_top_groups), the others as group="other"; jobs '
        'without a group are group="".',
        labels=["worker", "group"],
        unit="seconds",
    )
    names = list(workers)
    for name, groups in zip(names, read(client, [workers[n] for n in names]), strict=True):
        labelled: dict[str, Histogram] = {}
        for group, counts in groups.items():
            label = OTHER_LABEL if group == OTHER else group  # a group named so joins it
            mine = labelled.get(label)
            if mine is None:
                labelled[label] = counts
            else:
                for i, value in enumerate(counts):
                    mine[i] += value
        for label, counts in sorted(labelled.items()):
            family.add_metric([name, label], _cumulative(counts), counts[SLOTS])
    yield family
