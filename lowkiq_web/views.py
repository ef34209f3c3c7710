"""The dashboard's pages and htmx fragments (GET only), and ``/api/v1/stats``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from flask import Response, jsonify, render_template, request

import lowkiq
from lowkiq.telemetry import prometheus
from lowkiq_web import chart, job_events, listing, rate_limits
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.bulk import bulk_actions, job_actions
from lowkiq_web.busy import busy_details
from lowkiq_web.groups import group_table
from lowkiq_web.overview import find_worker, move_targets, redis_info

#: Refresh intervals offered by the dashboard, seconds; the first is the default.
INTERVALS = (5, 2, 10, 20)
#: Payloads shown per job in a list (the job page shows them all, a page at a time).
LIST_PAYLOADS = 10
#: Payloads per page of the job page.
JOB_PAYLOADS = 100
#: Groups shown on a worker's pages: those with the most queued jobs.
GROUPS_SHOWN = 20


def live_controls(args: dict[str, str] | Any) -> tuple[int, bool]:
    """The refresh interval and pause switch of a request, checked."""
    text = args.get("interval") or str(INTERVALS[0])
    if text not in {str(i) for i in INTERVALS}:
        choices = ", ".join(map(str, sorted(INTERVALS)))
        raise listing.BadParameter(f"interval must be one of {choices} seconds, got {text!r}")
    paused = args.get("paused", "")
    if paused not in ("", "1", "on"):
        raise listing.BadParameter(f"paused must be 1 or empty, got {paused!r}")
    return int(text), bool(paused)


def _live_context() -> dict[str, Any]:
    interval, paused = live_controls(request.args)
    samples = chart.parse_history(request.args.get("history", ""))
    data = lowkiq.overview()
    now = chart.Sample(data.at, data.totals["processed"], data.totals["failed"])
    if samples:
        samples.append(now)
    else:  # a fresh page: start from the stored history
        samples = chart.stored_samples(now)
    return {
        "overview": data,
        "paused_workers": lowkiq.paused_workers(),
        "rate_limits": rate_limits.limits_by_worker(),
        "redis": redis_info(),
        "chart": chart.build_chart(samples, interval * (chart.MAX_SAMPLES - 2)),
        "history": chart.encode_history(samples),
        "interval": interval,
        "paused": paused,
        "intervals": sorted(INTERVALS),
    }


@lowkiq_web.get("/")
def dashboard() -> str:
    """Totals, the processed/failed chart, a row per worker and the Redis server."""
    return render_template("lowkiq/dashboard.html", **_live_context())


@lowkiq_web.get("/live")
def live() -> str:
    """The dashboard's live part alone, for htmx polling."""
    return render_template("lowkiq/_live.html", **_live_context())


@lowkiq_web.get("/api/v1/stats")
def stats() -> Response:
    """The document of SPEC §5: totals and per-worker length, morgue_length, lag."""
    return jsonify(lowkiq.stats())


@lowkiq_web.get("/metrics")
def prometheus_metrics() -> Response:
    """Every worker's metrics in the Prometheus text format, read from Redis (the same in
    every process serving the dashboard)."""
    body, content_type = prometheus.render(request.headers.get("Accept", ""))
    return Response(body, content_type=content_type)


#: The page function of each list.
PAGES = {
    "enqueued": listing.enqueued_page,
    "retries": listing.retries_page,
    "scheduled": listing.scheduled_page,
    "dead": listing.dead_page,
    "busy": listing.busy_page,
}


@lowkiq_web.context_processor
def count_helpers() -> dict[str, Any]:
    """``scheduled_count(worker)`` for the counts bar of every worker page,
    ``job_actions_of(kind)`` for the job page's buttons and ``move_targets(worker)`` for
    the Move action's choice of worker."""
    return {
        "scheduled_count": lambda name: find_worker(name).queries().scheduled_count(),
        "job_actions_of": job_actions,
        "move_targets": move_targets,
    }


def list_counts(worker: type[lowkiq.Worker], metrics: Mapping[str, float]) -> dict[str, int]:
    """The worker's counts (its ``metrics``) and ``scheduled``: what the bulk actions'
    questions say they would touch."""
    counts = {name: int(value) for name, value in metrics.items()}
    counts["scheduled"] = worker.queries().scheduled_count()
    return counts


def list_context(worker_name: str, kind: str, args: Any) -> dict[str, Any]:
    """Everything a list page (or its htmx fragment) renders."""
    worker = find_worker(worker_name)
    query = listing.parse_query(kind, args)
    queries = worker.queries(payloads_limit=LIST_PAYLOADS)
    page = PAGES[kind](queries, query)
    metrics = worker.metrics()
    return {
        "worker": worker.__name__,
        "kind": kind,
        "title": listing.TITLES[kind],
        "query": query,
        "page": page,
        "orders": listing.ORDERS[kind],
        "per_page": listing.PER_PAGE,
        "search_max": listing.SEARCH_MAX,
        "search_reads": listing.SEARCH_READS,
        "metrics": metrics,
        "counts": list_counts(worker, cast(Mapping[str, float], metrics)),
        "job_actions": job_actions(kind),
        "worker_paused": worker.paused(),
        "rate": worker.rate_limit_status(),
        "bulk_actions": bulk_actions(kind),
        "busy_details": (
            busy_details(worker, [job["id"] for job in page.jobs]) if kind == "busy" else {}
        ),
    }


def list_page(worker_name: str, kind: str) -> str:
    """A list page: the list; on the Enqueued page, above it, the worker's pause and rate
    limit controls and its groups (SPEC §11) with the most queued jobs (none when its jobs
    have no group)."""
    context = list_context(worker_name, kind, request.args)
    groups = None
    if kind == "enqueued":
        groups = group_table(find_worker(worker_name), GROUPS_SHOWN)
    return render_template("lowkiq/list.html", groups=groups, groups_shown=GROUPS_SHOWN, **context)


@lowkiq_web.get("/<worker>/busy")
def busy(worker: str) -> str:
    """Jobs now in the worker's processing areas."""
    return list_page(worker, "busy")


@lowkiq_web.get("/<worker>/enqueued")
def enqueued(worker: str) -> str:
    """Queued jobs, by perform_in, id or retry_count, from a value, paginated."""
    return list_page(worker, "enqueued")


@lowkiq_web.get("/<worker>/retries")
def retries(worker: str) -> str:
    """Queued jobs that failed (retry_count >= 0), by retry_count or id, paginated."""
    return list_page(worker, "retries")


@lowkiq_web.get("/<worker>/scheduled")
def scheduled(worker: str) -> str:
    """Queued jobs not yet due (perform_in after now), soonest first, paginated."""
    return list_page(worker, "scheduled")


@lowkiq_web.get("/<worker>/dead")
def dead(worker: str) -> str:
    """Dead jobs (the morgue), by updated_at or id, from a value, paginated."""
    return list_page(worker, "dead")


@lowkiq_web.get("/<worker>/job")
def job(worker: str) -> tuple[str, int]:
    """One job by exact id: wherever it is (processing, queue, morgue), and the events a
    tracked worker recorded of it (shown, with a 200, when the job is gone too)."""
    found = find_worker(worker)
    job_id = request.args.get("id", "")
    if not job_id or "\0" in job_id:
        raise listing.BadParameter("id is required (an exact job id, without NUL)")
    start = _payloads_from(request.args)
    queries = found.queries(payloads_limit=JOB_PAYLOADS)
    places = {
        "busy": [j for j in queries.processing_data() if j["id"] == job_id],
        "enqueued": queries.fetch([job_id]),
        "dead": queries.morgue_fetch([job_id]),
    }
    if start:
        for job in places["enqueued"]:
            job["payloads"] = queries.payloads(job_id, start, JOB_PAYLOADS)
        for job in places["dead"]:
            job["payloads"] = queries.morgue_payloads(job_id, start, JOB_PAYLOADS)
    timeline = job_events.timeline(found, job_id)
    status = 200 if any(places.values()) or timeline.events else 404
    context = {
        "worker": found.__name__,
        "job_id": job_id,
        "places": places,
        "payloads_from": start,
        "payloads_per_page": JOB_PAYLOADS,
        "worker_paused": found.paused(),
        "yields": queries.yields(job_id),
        "timeline": timeline,
        "job_events": job_events,
    }
    return render_template("lowkiq/job.html", metrics=found.metrics(), **context), status


def _payloads_from(args: Any) -> int:
    """The job page's first payload index (``payloads_from``), checked."""
    text = args.get("payloads_from") or "0"
    if not text.isdigit() or not text.isascii():
        raise listing.BadParameter(f"payloads_from must be an integer >= 0, got {text!r}")
    return int(text)
