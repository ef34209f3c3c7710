"""``lowkiq worker --metrics-port``: the installation's Prometheus metrics served by a worker
process (with --processes, by the first one), scraped and parsed with prometheus_client."""

from __future__ import annotations

import signal
import socket
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.apps.runner import eventually


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name: [(labels, value), ...]."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def serving(port: int) -> bool:
    try:
        scrape(port)
    except urllib.error.URLError:
        return False
    return True


def one(samples: dict, name: str, **labels: str) -> float:
    (found,) = [v for got, v in samples.get(name, []) if got == labels]
    return found


def test_the_first_worker_process_serves_the_installation_metrics(workers, recorder):
    port = free_port()
    worker = workers("--processes", "2", "--metrics-port", str(port), "--metrics-host", "127.0.0.1")
    eventually(lambda: serving(port))  # the other process may have started first
    recorder.perform_async([{"id": n, "payload": {"v": n}} for n in range(20)])
    eventually(
        lambda: (
            one(scrape(port), "lowkiq_jobs_processed_total", worker="Recorder", outcome="success")
            == 20
        )
    )

    def owned() -> dict[str, float]:
        return {labels["process"]: v for labels, v in scrape(port)["lowkiq_shards_owned"]}

    # Both processes serve shards, all 5 between them.
    eventually(lambda: len(s := owned()) == 2 and sum(s.values()) == 5 and min(s.values()) >= 1)
    # The history's counts reach Redis within the flush interval (5 s).
    count = "lowkiq_job_duration_seconds_count"
    eventually(lambda: one(scrape(port), count, worker="Recorder") == 20, timeout=15)
    assert one(scrape(port), "lowkiq_queue_wait_seconds_count", worker="Recorder") == 20
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_metrics_port_in_use_is_a_one_line_error(workers, recorder):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = workers("--metrics-port", str(port), "--metrics-host", "127.0.0.1", wait=False)
        assert worker.wait() != 0
    assert f"cannot serve metrics on 127.0.0.1:{port}" in worker.output()
