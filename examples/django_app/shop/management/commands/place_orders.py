"""``manage.py place_orders N``: save N orders, each enqueued for processing when its
transaction commits (and one more in a transaction that rolls back: never enqueued)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from examples.django_app.shop.jobs import OrderWorker
from examples.django_app.shop.models import Order


class Command(BaseCommand):
    help = "Place N orders; each is processed once its transaction commits."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("count", type=int)

    def handle(self, *args: Any, count: int, **options: Any) -> None:
        for number in range(count):
            with transaction.atomic():
                order = Order.objects.create(customer=f"customer {number}")
                # Enqueued at the commit: the worker always finds the order saved.
                OrderWorker.perform_async(
                    [{"id": order.pk, "payload": {"status": "paid"}}], on_commit=True
                )
        try:
            with transaction.atomic():
                order = Order.objects.create(customer="changed their mind")
                OrderWorker.perform_async(
                    [{"id": order.pk, "payload": {"status": "paid"}}], on_commit=True
                )
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        self.stdout.write(f"placed {count} orders")
