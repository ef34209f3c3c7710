"""The test app's django.tasks tasks."""

from __future__ import annotations

import json
import os

try:
    from django.tasks import task  # Django 6 and later
except ImportError:
    from django_tasks import task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def fail(message: str) -> None:
    raise ValueError(message)


@task(lowkiq_id="order_id")
def update_order(order_id: int, version: int) -> int:
    """Record each update of an order in ``RECORD_FILE``, as ``[order_id, version]``; a
    negative version raises."""
    if version < 0:
        raise ValueError(f"bad version {version}")
    with open(os.environ["RECORD_FILE"], "a") as out:
        out.write(json.dumps([order_id, version]) + "\n")
    return version


@task(queue_name="emails")
def send_email(to: str) -> str:
    return f"sent to {to}"


@task()
async def multiply(a: int, b: int) -> int:
    return a * b
