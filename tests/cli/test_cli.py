"""The `lowkiq` command: help, version, app errors, and which Redis it runs on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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
        # Said once, by the process that started the server.
        assert "embedded development Redis server" not in second.output()
        assert f"Redis unix://{tmp_path / '.lowkiq' / 'redis.sock'}" in second.output()
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


# -- info, enqueue, worker --only, and a bad REDIS_URL -------------------------------------------

TWO_WORKERS = """
import lowkiq

class OrderWorker(lowkiq.Worker):
    shards_count = 3

    @classmethod
    def perform(cls, payloads_by_id):
        for job_id in payloads_by_id:
            open("performed.txt", "a").write("order " + job_id + "\\n")

class MailWorker(lowkiq.Worker):
    shards_count = 2

    @classmethod
    def perform(cls, payloads_by_id):
        for job_id in payloads_by_id:
            open("performed.txt", "a").write("mail " + job_id + "\\n")

lowkiq.settings.workers = [OrderWorker, MailWorker]
lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 2
lowkiq.settings.heartbeat_interval = 0.5
"""


class OrderWorker(lowkiq.Worker):
    """The queue of TWO_WORKERS' OrderWorker, read from this process."""

    shards_count = 3


class MailWorker(lowkiq.Worker):
    """The queue of TWO_WORKERS' MailWorker."""

    shards_count = 2


def lowkiq_command(
    cwd: Path, redis_url: str, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m lowkiq ARGS`` in ``cwd`` on ``redis_url``."""
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lowkiq", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def two_workers(tmp_path: Path, redis_client: redis.Redis) -> Path:
    """A folder holding app.py (OrderWorker, MailWorker), on the test's flushed Redis."""
    (tmp_path / "app.py").write_text(TWO_WORKERS)
    lowkiq.settings.workers = [OrderWorker, MailWorker]
    return tmp_path


def test_enqueue_puts_one_job_and_info_shows_the_queues(two_workers: Path, redis_url: str) -> None:
    before = time.time()
    done = lowkiq_command(
        two_workers, redis_url, "enqueue", "OrderWorker", "--id", "42",
        "--payload", '{"status": "paid"}', "--delay", "60", "--score", "3", "-r", "app.py",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "enqueued OrderWorker id '42', due in 60s"
    [job] = OrderWorker.queries().fetch(["42"])
    assert job["payloads"] == [[{"status": "paid"}, 3.0]]
    assert before + 60 - 1 <= job["perform_in"] <= time.time() + 60 + 1
    assert lowkiq_command(two_workers, redis_url, "enqueue", "MailWorker", "--id", "m1",
                          "--group", "acme", "-r", "app.py").returncode == 0  # fmt: skip
    assert [job["group"] for job in MailWorker.queries().processing_data()] == []
    assert [job.get("group") for job in MailWorker.queries().fetch(["m1"])] == ["acme"]
    refused = lowkiq_command(two_workers, redis_url, "enqueue", "MailWorker", "--id", "m1",
                             "--group", "other", "-r", "app.py")  # fmt: skip
    assert refused.returncode != 0 and "queued in 'acme'" in refused.stderr

    shown = lowkiq_command(two_workers, redis_url, "info", "-r", "app.py", "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    by_name = {worker["name"]: worker for worker in info["workers"]}
    assert (by_name["OrderWorker"]["length"], by_name["OrderWorker"]["lag"]) == (1, 0)
    assert (by_name["MailWorker"]["length"], by_name["MailWorker"]["fresh"]) == (1, 1)
    assert by_name["OrderWorker"]["shards"] == 3 and by_name["OrderWorker"]["served_shards"] == 0
    assert info["total"]["length"] == 2 and info["processes"] == []

    table = lowkiq_command(two_workers, redis_url, "info", "-r", "app.py").stdout
    lines = table.splitlines()
    heading = next(n for n, line in enumerate(lines) if line.startswith("WORKER "))
    assert lines[heading].split() == ["WORKER", "QUEUED", "FRESH", "RETRIES", "DEAD", "BUSY",
                                      "LAG", "PROCESSED", "FAILED", "SERVED"]  # fmt: skip
    assert lines[heading + 1].split()[:3] == ["OrderWorker", "1", "1"]
    assert "0/3 shards" in lines[heading + 1]
    assert "no live worker process" in table


def test_worker_only_serves_the_named_workers_and_info_lists_it(
    two_workers: Path, redis_url: str
) -> None:
    OrderWorker.perform_async([{"id": "o1"}])
    MailWorker.perform_async([{"id": "m1"}])
    process = WorkerProcess("-r", "app.py", "--only", "MailWorker", cwd=two_workers,
                            env={"REDIS_URL": redis_url})  # fmt: skip
    try:
        process.wait_started()
        eventually(lambda: (two_workers / "performed.txt").exists())
        time.sleep(1.0)  # OrderWorker's due job stays queued
        assert (two_workers / "performed.txt").read_text() == "mail m1\n"
        assert OrderWorker.metrics()["length"] == 1

        def served() -> dict[str, Any] | None:
            info = json.loads(lowkiq_command(two_workers, redis_url, "info", "-r", "app.py",
                                             "--json").stdout)  # fmt: skip
            mail = info["workers"][1]
            told = info["processes"] and info["processes"][0]["pid"]  # its first beat's info
            return info if mail["served_shards"] == 2 and told else None

        info = eventually(served)
        [live] = info["processes"]
        assert live["queues"] == ["MailWorker"] and live["pid"] == process.process.pid
        assert info["workers"][0]["served_shards"] == 0
        table = lowkiq_command(two_workers, redis_url, "info", "-r", "app.py").stdout
        assert "1 live worker process" in table and f":{process.process.pid}:" in table
    finally:
        process.close()


def test_worker_only_an_unknown_name_is_a_one_line_error(two_workers: Path, redis_url: str) -> None:
    done = lowkiq_command(two_workers, redis_url, "worker", "-r", "app.py",
                          "--only", "MailWorker", "--only", "Nope")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "Error: no worker 'Nope' in settings.workers (workers: OrderWorker, MailWorker)"
    ]


def test_a_misspelt_worker_name_gets_a_suggestion(two_workers: Path, redis_url: str) -> None:
    only = lowkiq_command(two_workers, redis_url, "worker", "-r", "app.py", "--only", "MailWorkr")
    assert only.returncode == 2
    assert only.stderr.splitlines() == [
        "Error: no worker 'MailWorkr' in settings.workers "
        "(did you mean 'MailWorker'? workers: OrderWorker, MailWorker)"
    ]
    jobs = lowkiq_command(two_workers, redis_url, "jobs", "delete", "orderworker", "1", "-r",
                          "app.py")  # fmt: skip
    assert jobs.returncode == 2
    assert "(did you mean 'OrderWorker'? workers:" in jobs.stderr
    moved = lowkiq_command(two_workers, redis_url, "jobs", "move", "OrderWorker", "1",
                           "--to", "Mail", "-r", "app.py")  # fmt: skip
    assert "no worker 'Mail' in settings.workers (did you mean 'MailWorker'?" in moved.stderr


def test_the_start_line_names_the_shards_served_as_ranges(
    two_workers: Path, redis_url: str
) -> None:
    process = WorkerProcess("-r", "app.py", cwd=two_workers, env={"REDIS_URL": redis_url})
    try:
        process.wait_started()
        [line] = [line for line in process.output().splitlines() if " threads serve " in line]
        served = line.split(" threads serve ")[1].split()
        assert sorted(served) == ["MailWorker:0-1", "OrderWorker:0-2"], line
    finally:
        process.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["OrderWorker", "--id", "1", "--payload", "{bad"], "Error: --payload is not JSON"),
        (["Nope", "--id", "1"], "Error: no worker 'Nope' in settings.workers"),
        (["OrderWorker", "--id", "1", "--delay", "soon"], "Error: --delay must be a number"),
        (["OrderWorker", "--id", "1", "--delay", "-5"], "Error: job 0: 'delay' must be seconds"),
        (["OrderWorker", "--id", "1", "--score", "nan"], "Error: job 0: 'score' must be finite"),
        (["OrderWorker", "--id", "1", "--payload", "NaN"], "Error: job 0: 'payload' cannot be"),
    ],
)
def test_enqueue_refuses_bad_input_in_one_line_and_changes_nothing(
    two_workers: Path, redis_url: str, redis_client: redis.Redis, args: list[str], says: str
) -> None:
    done = lowkiq_command(two_workers, redis_url, "enqueue", *args, "-r", "app.py")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(says), line
    assert redis_client.dbsize() == 0


#: Every command that talks to Redis, with the arguments it needs besides -r.
REDIS_COMMANDS = [
    ["worker"],
    ["web"],
    ["info"],
    ["enqueue", "OrderWorker", "--id", "1"],
    ["pause", "OrderWorker"],
    ["resume", "OrderWorker"],
    ["rate-limit", "OrderWorker"],
    ["reshard", "OrderWorker"],
    ["status"],
    ["quiet"],
]
BAD_URLS = [
    ("http://localhost:6379/0", "unknown scheme 'http://'"),
    ("redis://localhost:6379/orders", "the database number 'orders' is not a number"),
    ("redis://:s3cret@localhost:63a9/0", "Port could not be cast to integer value"),
    ("localhost:6379", "it has no scheme"),
]


@pytest.mark.parametrize("url,says", BAD_URLS, ids=["scheme", "database", "port", "no-scheme"])
@pytest.mark.parametrize("command", REDIS_COMMANDS, ids=[c[0] for c in REDIS_COMMANDS])
def test_a_bad_redis_url_is_a_one_line_error_in_every_command(
    tmp_path: Path, command: list[str], url: str, says: str
) -> None:
    (tmp_path / "cli_bad_url_app.py").write_text(TWO_WORKERS)
    app = str(tmp_path / "cli_bad_url_app.py")
    result = CliRunner().invoke(main, [*command, "-r", app], env={"REDIS_URL": url})
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("Error: REDIS_URL '") and says in line, line
    assert "s3cret" not in line


def test_a_database_redis_refuses_is_a_one_line_error(two_workers: Path, redis_url: str) -> None:
    kwargs = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs
    if kwargs.get("path"):
        bad = f"unix://{kwargs['path']}?db=999"
    else:
        bad = f"{redis_url.rsplit('/', 1)[0]}/999"
    for command in (["worker"], ["info"], ["enqueue", "MailWorker", "--id", "1"]):
        done = lowkiq_command(two_workers, bad, *command, "-r", "app.py", timeout=30)
        assert done.returncode == 2, (command, done.stderr)
        [line] = done.stderr.strip().splitlines()
        assert "DB index is out of range" in line, line
