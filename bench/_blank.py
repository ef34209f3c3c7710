"""Start `lowkiq worker` processes on bench/blank_app.py (shared by scale.py and handoff.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def blank_env(url: str, shards: int, **extra: str) -> dict[str, str]:
    """The environment of a blank-app process on Redis ``url`` with ``shards`` shards."""
    return {
        **os.environ,
        "REDIS_URL": url,
        "BENCH_SHARDS": str(shards),
        "PYTHONPATH": str(BENCH.parent),
        **extra,
    }


def start_blank_worker(
    env: dict[str, str], *args: str, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """A `lowkiq worker -r blank_app` process (WARNING logs), with extra ``args``; with
    ``log``, its INFO logs go to that file instead."""
    level = "WARNING" if log is None else "INFO"
    output = None if log is None else log.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "lowkiq", "worker", "-r", "blank_app", "--log-level", level,
             *args],
            env=env, cwd=BENCH, stdout=output, stderr=output,
        )  # fmt: skip
    finally:
        if output is not None:
            output.close()
