"""The orders example runs end to end and keeps the newest version of every order."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import redis

from tests.apps.runner import ROOT


def test_the_orders_example_stores_the_newest_version_of_each_order(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "examples.orders", "--once", "--no-web", "--orders", "300"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "300 of 300 orders in orders.db hold their newest version" in result.stdout
    db = sqlite3.connect(tmp_path / "orders.db")
    assert db.execute("SELECT DISTINCT version, status FROM orders").fetchall() == [
        (6, "delivered")
    ]
