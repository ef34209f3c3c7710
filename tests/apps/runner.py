"""Run ``lowkiq worker`` as a real subprocess for tests, and wait on what it records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def eventually(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


class WorkerProcess:
    """One ``python -m lowkiq worker`` process with its output captured to a file."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
        # Closed by close(); the file outlives this call.
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="lowkiq-worker-", suffix=".log", delete=False
        )
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lowkiq", "worker", *args],
            env=full_env,
            cwd=cwd,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        """Everything the process printed so far."""
        return Path(self.log.name).read_text()

    def wait_started(self, timeout: float = 20.0) -> None:
        """Wait until the threads run (the start-up log line about TTIN)."""
        eventually(lambda: "TTIN" in self.output() or self.process.poll() is not None, timeout)
        assert self.process.poll() is None, self.output()

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process."""
        self.process.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the exit code."""
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL it (no clean-up at all)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def close(self) -> None:
        """Kill if still running and drop the log file."""
        self.kill()
        self.log.close()
        os.unlink(self.log.name)


def main_thread_wakeups(pid: int) -> int:
    """How many times the process's main thread was scheduled so far (Linux)."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as stat:
        return int(stat.read().split()[2])


def unreachable_cluster_app(directory: Path, port: int) -> Path:
    """An app file in ``directory`` whose Redis is a Redis Cluster at ``127.0.0.1:port``,
    where nothing listens (one worker, ``Waiting``): its client cannot be made."""
    app = directory / "cluster_app.py"
    app.write_text(
        "import lowkiq, redis\n"
        f"lowkiq.settings.redis = lambda: redis.RedisCluster.from_url("
        f"'redis://127.0.0.1:{port}/0', socket_connect_timeout=0.5)\n"
        "class Waiting(lowkiq.Worker):\n"
        "    @classmethod\n"
        "    def perform(cls, payloads_by_id):\n"
        "        pass\n"
        "lowkiq.settings.workers = [Waiting]\n"
    )
    return app
