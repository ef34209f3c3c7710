"""The shop's workers: found by ``lowkiq.contrib.django`` (every app's ``jobs.py``)."""

from typing import Any

import lowkiq

from .models import Order


class OrderWorker(lowkiq.Worker):
    """Processes an order: its id is the order's, so the updates of one order merge and
    run in order, one at a time."""

    shards_count = 4
    batch_size = 10

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for order_id, payloads in payloads_by_id.items():
            order = Order.objects.get(pk=int(order_id))
            order.status = payloads[-1]["status"]
            order.updates += len(payloads)
            order.save(update_fields=["status", "updates"])
