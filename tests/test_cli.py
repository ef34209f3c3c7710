"""The `lowkiq` command: help, version, app errors, and which Redis it runs on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
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


def test_workers_asking_for_the_embedded_redis_share_one_persistent_server(
    tmp_path: Path,
) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update(PYTHONPATH=str(ROOT), LOWKIQ_EMBEDDED_REDIS="1")
    first = second = None
    try:
        first = WorkerProcess(
            "-r", "app.py", "--embedded-redis", cwd=tmp_path, env={"REDIS_URL": ""}
        )
        first.wait_started()
        assert "started the embedded development Redis server" in first.output()
        assert f"its data lives in {tmp_path / '.lowkiq'}" in first.output()
        assert (tmp_path / ".lowkiq" / "appendonlydir").exists() or list(
            (tmp_path / ".lowkiq").glob("appendonly*")
        )
        second = WorkerProcess(
            "-r", "app.py", cwd=tmp_path, env={"REDIS_URL": "", "LOWKIQ_EMBEDDED_REDIS": "1"}
        )
        second.wait_started()
        assert "using the embedded development Redis server" in second.output()
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


def test_without_redis_url_a_worker_fails_with_one_line_instead_of_starting_a_server(
    tmp_path: Path,
) -> None:
    if _answers("redis://localhost:6379/0"):
        pytest.skip("a Redis server answers at localhost:6379 on this machine")
    (tmp_path / "app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "LOWKIQ_EMBEDDED_REDIS")}
    env["PYTHONPATH"] = str(ROOT)
    for command in ("worker", "web"):
        result = subprocess.run(
            [sys.executable, "-m", "lowkiq", command, "-r", "app.py"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("Error: no Redis answers at redis://localhost:6379/0")
        assert "REDIS_URL" in line and "--embedded-redis" in line
    assert not (tmp_path / ".lowkiq").exists()


def test_the_worker_command_does_not_load_the_dashboard() -> None:
    check = (
        "import sys\n"
        "from lowkiq.cli import main\n"
        "try:\n"
        "    main(['worker', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('flask', 'lowkiq_web'))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Process the queues" in result.stdout
    assert "web" in CliRunner().invoke(main, ["--help"]).output
    assert "--read-only" in CliRunner().invoke(main, ["web", "--help"]).output
