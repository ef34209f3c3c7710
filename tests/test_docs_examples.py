"""The worker example of the README and of the getting-started page runs as written: its
``# app.py`` and ``# enqueue.py`` blocks are saved into an empty folder, a real
``lowkiq worker -r app.py`` serves them, and the shell commands the page shows
(``lowkiq enqueue``, ``lowkiq info``) succeed. The README's ``# test_orders.py`` passes
under pytest, beside its ``# app.py``, as a user's own test would."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.apps.runner import ROOT, WorkerProcess, eventually

DOCS = ["README.md", "docs/getting-started.md"]


def files_of(markdown: str) -> dict[str, str]:
    """The Python blocks whose first line names their file (``# app.py``), by name."""
    found = {}
    for block in re.findall(r"```python\n(.*?)```", markdown, re.S):
        named = re.fullmatch(r"# (\w+\.py)", block.splitlines()[0])
        if named:
            found[named.group(1)] = block
    return found


def lowkiq_lines(markdown: str) -> list[str]:
    """The ``lowkiq enqueue`` and ``lowkiq info`` lines of the page's ``sh`` blocks."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", markdown, re.S):
        for line in block.splitlines():
            command = line.split("#", 1)[0].strip()
            if command.startswith(("lowkiq enqueue", "lowkiq info")):
                lines.append(command)
    return lines


@pytest.mark.parametrize("doc", DOCS)
def test_the_worker_example_runs_as_written(
    doc: str, tmp_path: Path, redis_client: redis.Redis, redis_url: str
) -> None:
    markdown = (ROOT / doc).read_text()
    files = files_of(markdown)
    assert {"app.py", "enqueue.py"} <= set(files), f"{doc} lost its example"
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    worker = WorkerProcess("-r", "app.py", cwd=tmp_path, env={"REDIS_URL": redis_url})
    try:
        worker.wait_started()
        subprocess.run(
            [sys.executable, "enqueue.py"], cwd=tmp_path, env=env, check=True, timeout=60
        )
        eventually(lambda: "order 42 is shipped" in worker.output())
        time.sleep(0.5)
        assert "order 7" not in worker.output()  # due in a minute
        for line in lowkiq_lines(markdown):
            args = shlex.split(line)[1:]
            done = subprocess.run(
                [sys.executable, "-m", "lowkiq", *args],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, (line, done.stderr)
        assert "Traceback" not in worker.output()
    finally:
        worker.close()


def test_the_readmes_test_of_the_worker_passes_as_written(tmp_path: Path) -> None:
    files = files_of((ROOT / "README.md").read_text())
    assert {"app.py", "test_orders.py"} <= set(files), "README.md lost its testing example"
    for name in ("app.py", "test_orders.py"):
        (tmp_path / name).write_text(files[name])
    # A folder of the user's own: no conftest or configuration of this repository; the
    # lowkiq_redis fixture comes from the installed plugin.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "REDIS_URL"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_orders.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^1 passed", done.stdout, re.M), done.stdout
