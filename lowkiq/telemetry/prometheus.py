"""Prometheus metrics of a lowkiq installation, read from Redis at every scrape.

:class:`LowkiqCollector` reads the queues' metrics, the all-time totals of the
metrics history (:mod:`lowkiq.telemetry.store`) and the live processes from
Redis, so every process that serves it (each gunicorn worker of the
dashboard's ``/metrics``, a ``lowkiq worker --metrics-port``) answers the same
figures for the whole installation; nothing is kept in process memory.

============================================  =========  ==========================================
metric                                        type       labels, meaning
============================================  =========  ==========================================
``lowkiq_jobs_processed_total``               counter    worker, outcome (``success``/``failure``):
                                                         jobs acked / jobs of batches that raised
``lowkiq_job_duration_seconds``               histogram  worker: time of one ``perform`` call
``lowkiq_queue_wait_seconds``                 histogram  worker: perform start minus ``perform_in``
``lowkiq_group_wait_seconds``                 histogram  worker, group: the same by group, for the
                                                         ``settings.metrics_top_groups`` groups
                                                         with the most jobs and ``other``
``lowkiq_payloads_merged_total``              counter    worker: payloads performed in the run of
                                                         another payload of their id
``lowkiq_queue_length``                       gauge      worker: queued jobs
``lowkiq_queue_lag_seconds``                  gauge      worker: age of the earliest due job
``lowkiq_morgue_length``                      gauge      worker: dead jobs
``lowkiq_jobs_busy``                          gauge      worker: jobs in processing areas
``lowkiq_shards_owned``                       gauge      process, worker: shards whose lease a live
                                                         process holds
``lowkiq_rate_limit_jobs_per_second``         gauge      worker: the rate limit in force (workers
                                                         with one)
``lowkiq_rate_limited_total``                 counter    worker: times a shard had to wait for
                                                         rate-limit tokens
``lowkiq_workflows_completed_total``          counter    result (``succeeded``/``failed``):
                                                         workflows completed
``lowkiq_workflows_open``                     gauge      workflows not yet complete
============================================  =========  ==========================================
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from lowkiq.clients.connection import Client
from lowkiq.limits.rate_limit import rate_limit_overrides, rate_limit_status
from lowkiq.ownership.membership import ProcessInfo, live_processes
from lowkiq.settings import Settings, settings
from lowkiq.storage.metrics import overview
from lowkiq.telemetry import group_waits, store
from lowkiq.telemetry.counts import BUCKETS
from lowkiq.worker import Worker
from lowkiq.workflows import store as workflow_store


def _buckets(counts: tuple[int, ...]) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs, ending with ``+Inf``."""
    pairs = []
    seen = 0
    for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
        seen += count
        pairs.append((bound, float(seen)))
    return pairs


class LowkiqCollector(Collector):
    """Collects the metrics of every worker of ``config`` from Redis (see the module)."""

    def __init__(self, config: Settings = settings) -> None:
        self.config = config

    def collect(self) -> Iterator[Metric]:
        """Read Redis (four round trips) and yield the metric families."""
        config = self.config
        client = config.client()
        workers = {worker.__name__: worker for worker in config.workers}
        queues = {name: worker.queue(client, config) for name, worker in workers.items()}
        current = overview(client, queues)
        totals = store.read_totals(client, [queue.name for queue in queues.values()])
        _, processes = live_processes(client)

        processed = CounterMetricFamily(
            "lowkiq_jobs_processed",
            "Jobs performed: success (acked), failure (their batch raised), discarded "
            "(lowkiq.Discard), snoozed (lowkiq.Snooze: due again later), cancelled "
            "(Worker.actions().cancel while their batch ran).",
            labels=["worker", "outcome"],
        )
        duration = HistogramMetricFamily(
            "lowkiq_job_duration_seconds",
            "Time of one perform call (a batch of jobs).",
            labels=["worker"],
            unit="seconds",
        )
        wait = HistogramMetricFamily(
            "lowkiq_queue_wait_seconds",
            "Perform start minus the job's perform_in, per job.",
            labels=["worker"],
            unit="seconds",
        )
        merged = CounterMetricFamily(
            "lowkiq_payloads_merged",
            "Payloads performed in the same run as another payload of their id.",
            labels=["worker"],
        )
        length = GaugeMetricFamily("lowkiq_queue_length", "Queued jobs.", labels=["worker"])
        lag = GaugeMetricFamily(
            "lowkiq_queue_lag_seconds", "Age of the earliest due job.", labels=["worker"]
        )
        morgue = GaugeMetricFamily("lowkiq_morgue_length", "Jobs in the morgue.", labels=["worker"])
        busy = GaugeMetricFamily("lowkiq_jobs_busy", "Jobs in processing areas.", labels=["worker"])
        stale = CounterMetricFamily(
            "lowkiq_stale_batch_calls",
            "Acks, fails, yields, burials and restores that named a batch no longer in "
            "processing: they changed nothing.",
            labels=["worker"],
        )
        for name, queue in queues.items():
            metrics = current.by_worker[name]
            processed.add_metric([name, "success"], metrics["processed"])
            processed.add_metric([name, "failure"], metrics["failed"])
            processed.add_metric([name, "discarded"], metrics["discarded"])
            processed.add_metric([name, "snoozed"], metrics["snoozed"])
            processed.add_metric([name, "cancelled"], metrics["cancelled"])
            length.add_metric([name], metrics["length"])
            lag.add_metric([name], metrics["lag"])
            morgue.add_metric([name], metrics["morgue_length"])
            busy.add_metric([name], metrics["busy"])
            stale.add_metric([name], metrics["stale_calls"])
            total = totals[queue.name]
            duration.add_metric([name], _buckets(total.duration_buckets), total.duration_seconds)
            wait.add_metric([name], _buckets(total.wait_buckets), total.wait_seconds)
            merged.add_metric([name], total.payloads_merged)
        yield processed
        yield duration
        yield wait
        yield merged
        yield from (length, lag, morgue, busy, stale)
        yield self._shards_owned(processes, {q.name: name for name, q in queues.items()})
        yield from self._rate_limits(client, workers)
        yield from group_waits.families(client, {n: w.queue_name for n, w in workers.items()})
        yield from self._workflows(client)

    @staticmethod
    def _workflows(client: Client) -> Iterator[Metric]:
        completed = CounterMetricFamily(
            "lowkiq_workflows_completed",
            "Workflows completed: succeeded, or failed (a member dead, or cancelled).",
            labels=["result"],
        )
        for result, count in workflow_store.completed_counts(client).items():
            completed.add_metric([result], count)
        yield completed
        yield GaugeMetricFamily(
            "lowkiq_workflows_open",
            "Workflows not yet complete (or complete, their callbacks not yet enqueued).",
            value=workflow_store.unfinished_count(client),
        )

    @staticmethod
    def _rate_limits(client: Client, workers: dict[str, type[Worker]]) -> Iterator[Metric]:
        limit = GaugeMetricFamily(
            "lowkiq_rate_limit_jobs_per_second",
            "The rate limit in force: jobs started per second over every process.",
            labels=["worker"],
        )
        limited = CounterMetricFamily(
            "lowkiq_rate_limited",
            "Times a shard had to wait for rate-limit tokens.",
            labels=["worker"],
        )
        overrides = rate_limit_overrides(client)
        for name, worker in workers.items():
            status = rate_limit_status(client, worker.queue_name, worker.rate_limit, overrides)
            if status.limit is not None:
                limit.add_metric([name], status.limit.per_second)
            if status.limit is not None or status.waited:
                limited.add_metric([name], status.waited)
        yield limit
        yield limited

    @staticmethod
    def _shards_owned(processes: list[ProcessInfo], names: dict[str, str]) -> GaugeMetricFamily:
        owned = GaugeMetricFamily(
            "lowkiq_shards_owned",
            "Shards whose lease a live lowkiq worker process holds.",
            labels=["process", "worker"],
        )
        for process in processes:
            counts = dict.fromkeys(process.queues, 0)
            for shard in process.info.get("shards", []):
                queue = str(shard).rsplit(":", 1)[0]
                counts[queue] = counts.get(queue, 0) + 1
            for queue, count in sorted(counts.items()):
                owned.add_metric([process.id, names.get(queue, queue)], count)
        return owned


def registry(config: Settings = settings) -> CollectorRegistry:
    """A registry holding only the lowkiq collector of ``config``."""
    result = CollectorRegistry(auto_describe=False)
    result.register(LowkiqCollector(config))
    return result


def render(accept: str = "", config: Settings = settings) -> tuple[bytes, str]:
    """The metrics and their ``Content-Type``, in the format an ``Accept`` header asks for
    as prometheus_client's own server chooses it (by default the text format 0.0.4)."""
    encode, content_type = choose_encoder(accept)
    return encode(registry(config)), content_type


def serve(port: int, host: str, config: Settings = settings) -> tuple[WSGIServer, threading.Thread]:
    """Serve the metrics over HTTP on ``host:port`` from a daemon thread."""
    return start_http_server(port, addr=host, registry=registry(config))
