"""``lowkiq web`` on a port that is taken: one line naming it and exit 2, as
``lowkiq worker --health-port`` does, instead of gunicorn retrying for seconds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import redis

from tests.apps.runner import ROOT
from tests.cli.test_cli import TWO_WORKERS


def test_web_on_a_port_in_use_says_so_in_one_line_and_exits_2(
    tmp_path: Path, redis_client: redis.Redis, redis_url: str
) -> None:
    (tmp_path / "app.py").write_text(TWO_WORKERS)
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "lowkiq", "web", "-r", "app.py", "--port", str(port)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"Error: cannot serve the dashboard on 127.0.0.1:{port}: Address already in use "
        f"(check another with --port)"
    ]
    assert done.stdout == ""


def test_web_on_an_address_not_of_this_host_says_so(tmp_path: Path, redis_url: str) -> None:
    (tmp_path / "app.py").write_text(TWO_WORKERS)
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "lowkiq", "web", "-r", "app.py", "--host", "192.0.2.1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("Error: cannot serve the dashboard on 192.0.2.1:8000: ")
    assert line.endswith("(check --host)")
