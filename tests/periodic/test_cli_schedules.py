"""``lowkiq schedules``: list the schedules, pause, resume, change, add, remove and reset
them from a shell; bad input is a one-line error (exit 2) that changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import lowkiq
from lowkiq.cli import main
from lowkiq.storage import schedules as store
from tests.apps.runner import ROOT

APP = """
from datetime import timedelta

import lowkiq


class Digest(lowkiq.Worker):
    shards_count = 2


lowkiq.settings.workers = [Digest]
lowkiq.settings.schedules = [
    lowkiq.Schedule(Digest, id="digest", cron="0 7 * * *", timezone="Europe/Berlin"),
    lowkiq.Schedule(Digest, id="stock", every=timedelta(minutes=5)),
]
"""


@pytest.fixture
def app(tmp_path: Path, redis_client) -> str:
    path = tmp_path / "schedules_app.py"
    path.write_text(APP)
    return str(path)


def invoke(*args: str, stdin: str | None = None):
    """``lowkiq ARGS`` in this process, the app imported afresh (as a new process does)."""
    sys.modules.pop("schedules_app", None)
    return CliRunner().invoke(main, list(args), input=stdin)


def cli(app: str, *args: str, stdin: str | None = None) -> tuple[int, str]:
    result = invoke("schedules", *args, "-r", app, stdin=stdin)
    return result.exit_code, result.output


def listed(app: str) -> dict[str, dict]:
    result = invoke("schedules", "-r", app, "--json")
    assert result.exit_code == 0, result.output
    return {row["name"]: row for row in json.loads(result.output)}


def test_the_list_shows_each_schedule(app):
    result = invoke("schedules", "-r", app)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "NAME",
        "WORKER",
        "TICKS",
        "STATE",
        "NEXT",
        "RUN",
        "LAST",
        "RUN",
        "SOURCE",
    ]
    assert "cron 0 7 * * * (Europe/Berlin)" in lines[1] and "active" in lines[1]
    assert lines[2].startswith("stock") and "every 0:05:00" in lines[2] and "settings" in lines[2]


def test_each_change_from_the_shell(app):
    assert cli(app, "pause", "digest") == (0, "schedule 'digest' paused\n")
    assert listed(app)["digest"]["paused"] is True
    assert cli(app, "resume", "digest") == (0, "schedule 'digest' resumed\n")
    assert cli(app, "change", "stock", "--every", "90s") == (
        0,
        "schedule 'stock' now ticks every 0:01:30\n",
    )
    assert listed(app)["stock"]["every_seconds"] == 90 and listed(app)["stock"]["changed"]
    code, output = cli(app, "add", "nightly", "Digest", "--cron", "@daily", "--payload", '{"n": 1}')
    assert (code, output) == (0, "schedule 'nightly' added on Digest\n")
    assert listed(app)["nightly"]["source"] == "added"
    assert cli(app, "remove", "stock", stdin="n\n")[0] == 1  # declined: nothing removed
    assert not listed(app)["stock"]["removed"]
    assert cli(app, "remove", "stock", "--yes") == (0, "schedule 'stock' removed\n")
    assert listed(app)["stock"]["removed"]
    code, output = cli(app, "reset", "--all", "--yes")
    assert code == 0 and output.startswith("reset: ")
    assert set(listed(app)) == {"digest", "stock"} and not listed(app)["stock"]["removed"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("change", "digest", "--cron", "0 0 30 2 *"), "bad cron expression"),
        (("change", "stock", "--every", "0"), "every must be a positive period"),
        (("change", "stock", "--every", "-5"), "--every: a period is a number"),
        (("change", "stock", "--every", "soon"), "--every: a period is a number"),
        (("change", "nope", "--every", "60"), "no schedule named 'nope'"),
        (("pause", "nope"), "no schedule named 'nope'"),
        (("add", "x", "Nobody", "--every", "60"), "unknown worker 'Nobody'"),
        (("add", "digest", "Digest", "--every", "60"), "'digest' exists already"),
        (("add", "x", "Digest", "--every", "60", "--payload", "{"), "--payload is not JSON"),
        (("reset",), "give NAME or --all"),
    ],
)
def test_bad_input_is_a_one_line_error_and_changes_nothing(app, redis_client, args, message):
    code, output = cli(app, *args)
    assert code == 2 and output.startswith("Error: ") and message in output, output
    assert len(output.strip().splitlines()) == 1
    assert store.read_overrides(redis_client)[0] == 0


def test_the_real_command_pauses_a_schedule(app, redis_url):
    env = {k: v for k, v in os.environ.items() if k != "LOWKIQ_APP"}
    env.update(PYTHONPATH=str(ROOT), REDIS_URL=redis_url)
    done = subprocess.run(
        [sys.executable, "-m", "lowkiq", "schedules", "pause", "stock", "-r", app],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "schedule 'stock' paused\n"
    lowkiq.settings.workers = []
    assert store.read_overrides(lowkiq.settings.client())[0] == 1
