"""The example Django project (examples/django_app) end to end: migrate, place orders
that enqueue on commit, process them with ``manage.py lowkiq_worker``, run a task."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import redis

from tests.apps.runner import ROOT, eventually

MANAGE = str(ROOT / "examples" / "django_app" / "manage.py")


def test_the_example_project_processes_its_orders_on_a_real_worker(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "EXAMPLE_DB_DIR": str(tmp_path)}
    env.pop("DJANGO_SETTINGS_MODULE", None)

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, MANAGE, *args], env=env, cwd=tmp_path,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    manage("migrate", "-v", "0")
    assert "placed 30 orders" in manage("place_orders", "30")
    db = sqlite3.connect(tmp_path / "shop.sqlite3")

    def orders() -> list[tuple[str, int]]:
        return db.execute("SELECT status, updates FROM shop_order").fetchall()

    # The rolled-back order was never saved, nor enqueued.
    assert orders() == [("placed", 0)] * 30
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, MANAGE, "lowkiq_worker", "--threads", "2"],
            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        eventually(lambda: orders() == [("paid", 1)] * 30, 60)
        result_id = manage(
            "shell", "-v", "0", "-c",
            "from examples.django_app.shop.tasks import count_orders\n"
            "print(count_orders.enqueue('paid').id)",
        ).split()[-1]  # fmt: skip

        def counted() -> str:
            return manage(
                "shell", "-v", "0", "-c",
                "from examples.django_app.shop.tasks import count_orders\n"
                f"result = count_orders.get_result({result_id!r})\n"
                "print(result.status, result.return_value if result.is_finished else '')",
            ).strip().splitlines()[-1]  # fmt: skip

        assert eventually(lambda: counted() == "SUCCESSFUL 30", 60)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()
