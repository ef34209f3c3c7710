"""The `lowkiq` command: help, version, app errors, and the embedded Redis default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import redis
from click.testing import CliRunner

import lowkiq
from lowkiq.cli import main
from tests.apps.runner import ROOT, WorkerProcess, eventually


def test_version_and_help() -> None:
    runner = CliRunner()
    assert (
        runner.invoke(main, ["--version"]).output.strip() == f"lowkiq, version {lowkiq.__version__}"
    )
    help_text = runner.invoke(main, ["worker", "--help"]).output
    for option in ("--require", "--threads", "--nodes", "--node", "LOWKIQ_THREADS_PER_NODE"):
        assert option in help_text


def test_a_missing_app_file_is_a_one_line_error_with_exit_code_2() -> None:
    result = CliRunner().invoke(main, ["worker", "-r", "no/such/app.py"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: cannot load app 'no/such/app.py': no such file"
    ]


def test_a_broken_app_names_the_file_and_line(tmp_path: Path) -> None:
    app = tmp_path / "broken_app.py"
    app.write_text("import lowkiq\n\nraise RuntimeError('bad config')\n")
    result = CliRunner().invoke(main, ["worker", "-r", str(app)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "RuntimeError: bad config" in lines[0] and f"{app}, line 3" in lines[0]


def test_a_missing_module_is_a_one_line_error() -> None:
    result = CliRunner().invoke(main, ["worker", "-r", "no_such_module_here"])
    assert result.exit_code == 2
    assert "no module named 'no_such_module_here'" in result.output


def test_node_without_nodes_is_refused() -> None:
    result = CliRunner().invoke(main, ["worker", "-r", "tests.apps.recorder", "--node", "1"])
    assert result.exit_code == 2 and "--nodes and --node go together" in result.output


APP = """
import lowkiq

class Hello(lowkiq.Worker):
    shards_count = 2

    @classmethod
    def perform(cls, payloads_by_id):
        for job_id in payloads_by_id:
            open("performed.txt", "a").write(job_id + "\\n")

lowkiq.settings.workers = [Hello]
lowkiq.settings.poll_interval = 0.2
"""

ENQUEUE = "import sys; sys.path.insert(0, '.'); import app; app.Hello.perform_async([{'id': 'hi'}])"


def test_without_redis_url_workers_share_one_embedded_persistent_redis(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env["PYTHONPATH"] = str(ROOT)
    first = second = None
    try:
        first = WorkerProcess("-r", "app.py", cwd=tmp_path, env={"REDIS_URL": ""})
        first.wait_started()
        assert "embedded Redis" in first.output() and str(tmp_path / ".lowkiq") in first.output()
        assert (tmp_path / ".lowkiq" / "appendonlydir").exists() or list(
            (tmp_path / ".lowkiq").glob("appendonly*")
        )
        second = WorkerProcess("-r", "app.py", cwd=tmp_path, env={"REDIS_URL": ""})
        second.wait_started()
        assert "started an embedded Redis" not in second.output()
        subprocess.run([sys.executable, "-c", ENQUEUE], cwd=tmp_path, env=env, check=True)
        eventually(lambda: (tmp_path / "performed.txt").exists())
        assert (tmp_path / "performed.txt").read_text() == "hi\n"
        for process in (first, second):
            process.signal(signal.SIGTERM)
            assert process.wait() == 0
    finally:
        for process in (first, second):
            if process is not None:
                process.close()
        stop = subprocess.run(
            [sys.executable, "-m", "lowkiq", "redis", "stop"],
            cwd=tmp_path, env=env, capture_output=True, text=True,
        )  # fmt: skip
    assert stop.returncode == 0 and "stopped the embedded Redis server" in stop.stdout
    sock = tmp_path / ".lowkiq" / "redis.sock"
    assert not _answers(f"unix://{sock}")


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except (redis.ConnectionError, OSError):
        return False
