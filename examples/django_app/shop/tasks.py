"""A ``django.tasks`` task, run by a lowkiq worker: ``count_orders.enqueue("paid")``."""

try:
    from django.tasks import task  # Django 6 and later
except ImportError:
    from django_tasks import task

from .models import Order


@task()
def count_orders(status: str) -> int:
    """How many orders have ``status``."""
    return Order.objects.filter(status=status).count()
