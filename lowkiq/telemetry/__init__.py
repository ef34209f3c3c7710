"""Telemetry: what workers did, kept in Redis, and its Prometheus export.

* :mod:`~lowkiq.telemetry.counts` — the counts of one worker over some span
  (performs, failures, jobs as settled, payloads, perform time and queue wait
  with their histograms) and the quantiles read from them;
* :mod:`~lowkiq.telemetry.periods` — one thread's counts by minute or second,
  and what of them is written;
* :mod:`~lowkiq.telemetry.recorder` — per-process aggregation on the hot path
  and the flush thread that adds it to Redis every few seconds;
* :mod:`~lowkiq.telemetry.store` — the history in Redis, per minute, ten
  minutes and hour (72 hours), and its all-time totals: one round trip to
  write, one to read;
* :mod:`~lowkiq.telemetry.recent` — jobs processed and failed per second over
  the last ten minutes, for the dashboard's live chart;
* :mod:`~lowkiq.telemetry.history` — a worker's history over a window, for the
  dashboard and ``lowkiq.history()``;
* :mod:`~lowkiq.telemetry.prometheus` — the Prometheus collector, read from
  Redis at every scrape (``/metrics``, ``lowkiq worker --metrics-port``).
"""
