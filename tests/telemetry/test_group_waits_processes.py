"""``lowkiq_group_wait_seconds`` from a real worker process: every job it ran is counted
in its group's histogram (jobs without a group in ``""``) once the process stopped (its
last counts are written then)."""

from __future__ import annotations

import signal

import redis
from prometheus_client.parser import text_string_to_metric_families

import lowkiq
from lowkiq.telemetry.prometheus import render
from tests.apps.runner import WorkerProcess, eventually


class Tenants(lowkiq.Worker):
    """The app's worker (tests/apps/group_control.py)."""

    shards_count = 8


def counts() -> dict[str, float]:
    """``lowkiq_group_wait_seconds_count`` of Tenants by group."""
    found = {}
    for family in text_string_to_metric_families(render()[0].decode()):
        for sample in family.samples:
            if sample.name == "lowkiq_group_wait_seconds_count":
                found[sample.labels["group"]] = sample.value
    return found


def test_a_worker_process_counts_every_jobs_wait_in_its_group(
    redis_url: str, redis_client: redis.Redis
) -> None:
    lowkiq.settings.workers = [Tenants]
    jobs = {"A": 60, "B": 7}
    Tenants.perform_async(
        [
            {"id": f"{g}{n}", "group": g, "payload": {"g": g}}
            for g, c in jobs.items()
            for n in range(c)
        ]
        + [{"id": f"x{n}", "payload": {"g": "none"}} for n in range(5)]
    )
    process = WorkerProcess(
        "-r", "tests/apps/group_control.py", "--threads", "2", env={"REDIS_URL": redis_url}
    )
    try:
        eventually(lambda: redis_client.llen("test:finished") >= 72, timeout=30)
        process.signal(signal.SIGTERM)
        assert process.wait() == 0
    finally:
        process.close()
    # Jobs without a group are the group "".
    assert counts() == {"A": 60.0, "B": 7.0, "": 5.0}
