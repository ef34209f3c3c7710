"""How the commands find and load the app: an app that raises is named at the user's line
(its traceback with --traceback or at --log-level debug), and LOWKIQ_APP stands for -r in
every command that loads one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import lowkiq
from tests.apps.runner import ROOT
from tests.cli.test_cli import TWO_WORKERS, MailWorker, OrderWorker

#: An app that reads a variable the shell does not set: os.environ raises in <frozen os>.
NEEDS_A_VARIABLE = """import os

import lowkiq

DATABASE = os.environ["ORDERS_DATABASE_URL"]
"""


def run(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m lowkiq ARGS`` in ``cwd``, with ``env`` added to this environment."""
    full = {k: v for k, v in os.environ.items() if k != "LOWKIQ_APP"}
    full.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "lowkiq", *args],
        cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [["worker"], ["info"], ["web", "--port", "0"], ["enqueue", "X", "--id", "1"]],
    ids=lambda c: c[0],
)
def test_an_app_raising_in_the_standard_library_is_named_at_the_users_line(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "app.py").write_text(NEEDS_A_VARIABLE)
    done = run(tmp_path, *command, "-r", "app.py")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: cannot load app 'app.py': KeyError: 'ORDERS_DATABASE_URL'")
    assert f"({tmp_path / 'app.py'}, line 5)" in line, line
    assert "frozen" not in line and "--traceback" in line


@pytest.mark.parametrize(
    "flags",
    [
        ["worker", "--traceback"],
        ["worker", "--log-level", "debug"],
        ["web", "--port", "0", "--traceback"],
    ],
)
def test_the_full_traceback_is_shown_on_request(tmp_path: Path, flags: list[str]) -> None:
    (tmp_path / "app.py").write_text(NEEDS_A_VARIABLE)
    done = run(tmp_path, *flags, "-r", "app.py")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert f'  File "{tmp_path / "app.py"}", line 5, in <module>' in lines
    assert '    DATABASE = os.environ["ORDERS_DATABASE_URL"]' in lines
    assert lines[-2] == "KeyError: 'ORDERS_DATABASE_URL'"
    assert lines[-1].startswith("Error: cannot load app 'app.py': KeyError")
    assert not any("importlib" in line for line in lines)


def test_an_app_that_imports_a_broken_module_is_named_where_that_module_raised(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.py").write_text("import json\n\nSETTINGS = json.loads('{bad')\n")
    (tmp_path / "app.py").write_text("import lowkiq\nimport config\n")
    done = run(tmp_path, "info", "-r", "app.py")
    [line] = done.stderr.strip().splitlines()
    assert "JSONDecodeError" in line and f"({tmp_path / 'config.py'}, line 3)" in line, line


#: Each command that loads an app, its arguments besides the app, and what it prints.
COMMANDS = [
    (["info", "--json"], 0, '"OrderWorker"'),
    (["enqueue", "OrderWorker", "--id", "7"], 0, "enqueued OrderWorker id '7'"),
    (["jobs", "perform-now", "OrderWorker", "7"], 0, "OrderWorker: 1 job made due now"),
    (["pause", "MailWorker"], 0, "MailWorker paused"),
    (["resume", "MailWorker"], 0, "MailWorker resumed"),
    (["rate-limit", "MailWorker"], 0, "MailWorker: rate limit none"),
    (["reshard", "MailWorker"], 0, "MailWorker"),
    (["status"], 1, "no worker process of host"),
    (["quiet"], 1, "is registered"),
    (["jobs", "delete", "OrderWorker", "7"], 0, "OrderWorker: 1 job deleted"),
]


def test_lowkiq_app_stands_for_r_in_every_command(
    tmp_path: Path, redis_client: redis.Redis, redis_url: str
) -> None:
    (tmp_path / "app.py").write_text(TWO_WORKERS)
    lowkiq.settings.workers = [OrderWorker, MailWorker]
    env = {"REDIS_URL": redis_url, "LOWKIQ_APP": "app.py"}
    for args, code, says in COMMANDS:
        done = run(tmp_path, *args, env=env)
        assert done.returncode == code, (args, done.stderr)
        assert says in done.stdout + done.stderr, (args, done.stdout, done.stderr)
    assert OrderWorker.metrics()["length"] == 0


def test_a_worker_runs_the_app_named_by_lowkiq_app(tmp_path: Path, redis_url: str) -> None:
    (tmp_path / "app.py").write_text(NEEDS_A_VARIABLE)
    done = run(tmp_path, "worker", env={"REDIS_URL": redis_url, "LOWKIQ_APP": "app.py"})
    assert done.returncode == 2 and "cannot load app 'app.py'" in done.stderr


def test_status_with_health_url_ignores_lowkiq_app(tmp_path: Path) -> None:
    done = run(tmp_path, "status", "--health-url", "http://127.0.0.1:9/ready",
               env={"LOWKIQ_APP": "app.py"})  # fmt: skip
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert "does not answer" in line, line


def test_without_r_or_lowkiq_app_the_error_names_both(tmp_path: Path) -> None:
    done = run(tmp_path, "info")
    assert done.returncode == 2
    assert done.stderr == "Error: give the app: -r/--require PATH_OR_MODULE, or set LOWKIQ_APP\n"
    assert "LOWKIQ_APP" in run(tmp_path, "info", "--help").stdout


def test_traceback_is_asked_per_invocation(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from lowkiq.cli import main

    (tmp_path / "needs_a_variable_app.py").write_text(NEEDS_A_VARIABLE)
    app = str(tmp_path / "needs_a_variable_app.py")
    asked = CliRunner().invoke(main, ["info", "-r", app, "--traceback"])
    assert "Traceback (most recent call last):" in asked.output
    again = CliRunner().invoke(main, ["info", "-r", app])
    assert again.exit_code == 2
    assert again.output.startswith("Error: cannot load app"), again.output
