"""``lowkiq status`` and ``lowkiq quiet`` against real worker processes."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Callable

import lowkiq
from tests.apps.runner import ROOT, WorkerProcess, eventually, unreachable_cluster_app
from tests.health.probe import free_ports, verdict

Start = Callable[..., WorkerProcess]
APP = "tests/apps/recorder.py"


def lowkiq_command(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lowkiq", *args],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def registered(pid: int) -> lowkiq.Process | None:
    return next((p for p in lowkiq.processes().processes if p.pid == pid), None)


def test_status_exits_0_for_this_hosts_registered_processes_and_1_with_the_reason(
    workers: Start, recorder: type, redis_url: str
) -> None:
    host = socket.gethostname()
    nobody = lowkiq_command(redis_url, "status", "-r", APP)
    assert nobody.returncode == 1
    assert nobody.stderr == f"Error: no worker process of host {host} is registered\n"

    worker = workers("--threads", "2")
    pid = worker.process.pid
    process = eventually(lambda: registered(pid))
    ok = lowkiq_command(redis_url, "status", "-r", APP)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"{process.id}: 2 threads, ")
    assert lowkiq_command(redis_url, "status", "-r", APP, "--pid", str(pid)).returncode == 0
    by_id = lowkiq_command(redis_url, "status", "-r", APP, "--process-id", process.id)
    assert by_id.returncode == 0

    short = lowkiq_command(redis_url, "status", "-r", APP, "--processes", "2")
    assert short.returncode == 1 and short.stdout.startswith(process.id)
    assert short.stderr == (
        f"Error: 1 of the 2 expected worker processes of host {host} are registered\n"
    )
    other = lowkiq_command(redis_url, "status", "-r", APP, "--pid", str(pid + 100000))
    assert other.returncode == 1
    assert other.stderr.strip().splitlines() == [
        f"Error: process {pid + 100000} of host {host} is not registered "
        "(not running, or its heartbeat lapsed)"
    ]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_status_without_redis_is_a_one_line_failure(tmp_path) -> None:
    down = lowkiq_command(f"unix://{tmp_path}/none.sock", "status", "-r", APP)
    assert down.returncode == 1
    [line] = down.stderr.strip().splitlines()
    assert line.startswith("Error: Redis did not answer: ConnectionError")


def test_quiet_wait_hands_the_shards_over_and_status_health_url_follows_ready(
    workers: Start, recorder: type, redis_url: str
) -> None:
    port = free_ports()
    worker = workers("--health-port", str(port), "--health-host", "127.0.0.1")
    ready_url = f"http://127.0.0.1:{port}/ready"
    eventually(lambda: verdict(port, "/ready")[0] == 200)
    up = lowkiq_command(redis_url, "status", "--health-url", ready_url)
    assert up.returncode == 0 and up.stdout == f"{ready_url}: 200\n"
    eventually(lambda: len(registered(worker.process.pid).shards) == 5)

    quieted = lowkiq_command(
        redis_url, "quiet", "-r", APP, "--pid", str(worker.process.pid), "--wait", "--timeout", "20"
    )
    assert quieted.returncode == 0, quieted.stderr
    assert quieted.stdout.endswith("handed over: no shard held, no batch running\n")
    process = registered(worker.process.pid)
    assert process is not None and process.quiet and process.shards == []

    down = lowkiq_command(redis_url, "status", "--health-url", ready_url)
    assert down.returncode == 1
    assert down.stderr.startswith(f"Error: {ready_url} answered 503: quiet")
    # Quiet, it is still alive and registered.
    assert lowkiq_command(redis_url, "status", "-r", APP).returncode == 0
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    gone = lowkiq_command(redis_url, "status", "--health-url", ready_url)
    assert gone.returncode == 1 and "does not answer" in gone.stderr


def test_quiet_without_a_process_and_status_with_both_sources_are_refused(
    recorder: type, redis_url: str
) -> None:
    nobody = lowkiq_command(redis_url, "quiet", "-r", APP)
    assert nobody.returncode == 1 and "is registered" in nobody.stderr
    both = lowkiq_command(redis_url, "status", "-r", APP, "--health-url", "http://x/ready")
    assert both.returncode == 2 and "--health-url goes without -r" in both.stderr
    mixed = lowkiq_command(redis_url, "status", "-r", APP, "--pid", "1", "--processes", "2")
    assert mixed.returncode == 2 and "not with --pid" in mixed.stderr
    neither = lowkiq_command(redis_url, "status")
    assert neither.returncode == 2 and "give -r/--require" in neither.stderr


def test_info_with_no_cluster_node_answering_is_a_one_line_failure(tmp_path) -> None:
    """A Redis Cluster's client reads its nodes when made: with none answering, lowkiq
    info says so in one line (it printed redis-py's traceback)."""
    port = free_ports()  # nothing listens there
    app = unreachable_cluster_app(tmp_path, port)
    down = lowkiq_command(f"redis://127.0.0.1:{port}/0", "info", "-r", str(app))
    assert down.returncode == 2
    [line] = down.stderr.strip().splitlines()
    assert line.startswith("Error: Redis did not answer: Redis Cluster cannot be connected")
