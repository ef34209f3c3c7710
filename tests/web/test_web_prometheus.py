"""``/metrics`` on the blueprint: the Prometheus text format, parsed with prometheus_client's
own parser; the same figures from every gunicorn process."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_web_mounting import REPO, _free_port, _wait_for
from web_support import (
    LONG_AGO,
    MailWorker,
    OrderWorker,
    bury,
    enqueue,
    fail_all,
    hold,
    process,
    record_history,
)

import lowkiq


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_metrics_are_the_prometheus_text_format_of_every_worker(client):
    enqueue(OrderWorker, 30, perform_in=LONG_AGO)
    process(OrderWorker, 20)
    fail_all(OrderWorker)  # the 10 left fail once
    bury(MailWorker, 4)
    enqueue(MailWorker, 3, prefix="late", perform_in=time.time() - 30)
    hold(MailWorker)  # 3 jobs busy, popped 30 s late
    now = time.time()
    record_history(OrderWorker, now, batches=2, jobs=10, seconds=0.003, wait=0.2)
    record_history(OrderWorker, now, batches=1, jobs=10, seconds=4.0, wait=70.0, failed=True)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = scrape(response.get_data(as_text=True))

    total = "lowkiq_jobs_processed_total"
    assert value(samples, total, worker="OrderWorker", outcome="success") == 20
    assert value(samples, total, worker="OrderWorker", outcome="failure") == 10
    assert value(samples, total, worker="MailWorker", outcome="failure") == 4
    assert value(samples, "lowkiq_queue_length", worker="OrderWorker") == 10
    assert value(samples, "lowkiq_morgue_length", worker="MailWorker") == 4
    assert value(samples, "lowkiq_jobs_busy", worker="MailWorker") == 3
    assert value(samples, "lowkiq_queue_lag_seconds", worker="OrderWorker") == 0

    duration = "lowkiq_job_duration_seconds"
    assert value(samples, duration + "_count", worker="OrderWorker") == 3
    assert value(samples, duration + "_sum", worker="OrderWorker") == pytest.approx(4.006)
    assert value(samples, duration + "_bucket", worker="OrderWorker", le="0.0025") == 0
    assert value(samples, duration + "_bucket", worker="OrderWorker", le="0.005") == 2
    assert value(samples, duration + "_bucket", worker="OrderWorker", le="2.5") == 2
    assert value(samples, duration + "_bucket", worker="OrderWorker", le="5.0") == 3
    assert value(samples, duration + "_bucket", worker="OrderWorker", le="+Inf") == 3
    wait = "lowkiq_queue_wait_seconds"
    assert value(samples, wait + "_count", worker="OrderWorker") == 30
    assert value(samples, wait + "_bucket", worker="OrderWorker", le="60.0") == 20
    assert value(samples, wait + "_bucket", worker="OrderWorker", le="120.0") == 30
    assert value(samples, wait + "_sum", worker="OrderWorker") == pytest.approx(20 * 0.2 + 700)
    assert value(samples, wait + "_count", worker="MailWorker") == 0
    assert value(samples, "lowkiq_payloads_merged_total", worker="OrderWorker") == 0

    labels = {name for (_, pairs) in samples for name, _ in pairs}
    assert labels == {"worker", "outcome", "le", "result"}  # never a job id (result: workflows)


def test_openmetrics_when_the_scraper_asks_for_it(client):
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    response = client.get("/metrics", headers={"Accept": accept})
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    text = response.get_data(as_text=True)
    assert text.endswith("# EOF\n") and "lowkiq_jobs_processed_total" in text


def test_merged_payloads_are_counted(client):
    from lowkiq.storage.queue import PoppedJob
    from lowkiq.telemetry.recorder import Recorder

    recorder = Recorder(lowkiq.settings.client(), [OrderWorker.queue_name])
    tally = recorder.for_queue(OrderWorker.queue_name)
    started = time.time()
    tally.performed(
        [PoppedJob("a", -1, [1, 2, 3], started), PoppedJob("b", -1, [4], started)], started, False
    )
    recorder.flush()
    samples = scrape(client.get("/metrics").get_data(as_text=True))
    assert value(samples, "lowkiq_payloads_merged_total", worker="OrderWorker") == 2


def test_shards_owned_by_each_live_process(client, redis_client):
    from lowkiq.ownership.membership import Membership

    membership = Membership(redis_client, "host:1:abc", 10.0)
    membership.beat(
        5, {OrderWorker.queue_name: range(5)}, {"shards": ["OrderWorker:0", "OrderWorker:2"]}
    )
    samples = scrape(client.get("/metrics").get_data(as_text=True))
    owned = "lowkiq_shards_owned"
    assert value(samples, owned, process="host:1:abc", worker="OrderWorker") == 2


def test_redis_down_is_a_503_not_a_500(client):
    lowkiq.settings.redis = lambda: __import__("redis").Redis(port=1, socket_connect_timeout=0.2)
    response = client.get("/metrics")
    assert response.status_code == 503


def test_every_gunicorn_process_answers_the_same_figures(workers, redis_url, tmp_path):
    app = tmp_path / "app.py"
    app.write_text(
        "import lowkiq\n"
        "class OrderWorker(lowkiq.Worker):\n"
        "    shards_count = 3\n"
        "lowkiq.settings.workers = [OrderWorker]\n"
    )
    lowkiq.settings.workers = [OrderWorker]
    enqueue(OrderWorker, 12, perform_in=LONG_AGO)
    process(OrderWorker, 7)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    args = [sys.executable, "-m", "lowkiq", "web", "-r", str(app), "--port", str(port)]
    env = {"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        [*args, "--processes", "3"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for(url, server)

        def processed() -> set[Any]:
            figures = set()
            for _ in range(30):  # gunicorn spreads them over its processes
                with urllib.request.urlopen(url, timeout=5) as response:
                    samples = scrape(response.read().decode())
                figures.add(
                    value(
                        samples,
                        "lowkiq_jobs_processed_total",
                        worker="OrderWorker",
                        outcome="success",
                    )
                )
            return figures

        assert processed() == {7}
        process(OrderWorker, 5)
        assert processed() == {12}
    finally:
        server.terminate()
        output = server.communicate(timeout=10)[0].decode()
    pids = {
        line.split("pid: ")[1].split(")")[0]
        for line in output.splitlines()
        if "Booting worker" in line
    }
    assert len(pids) == 3, output
