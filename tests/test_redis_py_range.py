"""The redis-py range lowkiq claims is the range CI tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ci_tests_the_lowest_redis_py_that_pyproject_allows() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [requirement] = [dep for dep in project["dependencies"] if dep.startswith("redis")]
    lowest = re.search(r">=\s*([\d.]+)", requirement)
    assert lowest and re.search(r"<\s*\d", requirement), f"{requirement}: not a closed range"
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"REDIS_PY_LOWEST={lowest.group(1)}\n" in ci
    assert '"redis[hiredis]==$REDIS_PY_LOWEST"' in ci
