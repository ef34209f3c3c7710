"""A worker started while its Redis does not answer keeps saying so: a warning, then a
reminder with the time waited, and its ``/ready`` page names the Redis it waits for."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

from tests.apps.runner import ROOT, WorkerProcess, eventually
from tests.health.probe import free_ports, verdict


def closed_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_worker_waiting_for_redis_repeats_it_and_its_ready_page_names_it() -> None:
    port = closed_port()
    url = f"redis://127.0.0.1:{port}/0"
    health = free_ports()
    worker = WorkerProcess(
        "-r", "tests/apps/recorder.py", "--health-port", str(health), "--health-host", "127.0.0.1",
        env={"REDIS_URL": url},
    )  # fmt: skip
    try:
        eventually(lambda: "retrying with backoff" in worker.output(), timeout=30)
        status, document = eventually(
            lambda: verdict(health, "/ready")[0] and verdict(health, "/ready")
        )
        assert status == 503
        assert re.match(
            rf"not registered yet: waiting for Redis at {re.escape(url)} for \d+ s "
            rf"\(ConnectionError: .*{port}.*\)$",
            document["reason"],
        ), document["reason"]
        # The first reminder comes 15 s after the first failure.
        eventually(lambda: "still waiting for Redis" in worker.output(), timeout=60, interval=0.5)
        [reminder] = [line for line in worker.output().splitlines() if "still waiting" in line]
        said = rf"WARNING .* start: still waiting for Redis at {re.escape(url)} \(1\d s\)"
        assert re.search(said, reminder), reminder
        assert worker.process.poll() is None
        status, document = verdict(health, "/live")
        assert status == 200, document
    finally:
        worker.close()


def test_the_status_command_reports_the_same_reason() -> None:
    port = closed_port()
    health = free_ports()
    worker = WorkerProcess(
        "-r", "tests/apps/recorder.py", "--health-port", str(health), "--health-host", "127.0.0.1",
        env={"REDIS_URL": f"redis://127.0.0.1:{port}/0"},
    )  # fmt: skip
    try:
        eventually(lambda: "retrying with backoff" in worker.output(), timeout=30)
        done = subprocess.run(
            [sys.executable, "-m", "lowkiq", "status", "--health-url",
             f"http://127.0.0.1:{health}/ready"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 1
        assert f"waiting for Redis at redis://127.0.0.1:{port}/0" in done.stderr, done.stderr
    finally:
        worker.close()
