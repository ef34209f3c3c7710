"""An order, and the updates its worker applied."""

from django.db import models


class Order(models.Model):
    """An order: ``placed`` until its worker processed it."""

    customer = models.CharField(max_length=100)
    status = models.CharField(max_length=20, default="placed")
    #: How many of its jobs' payloads the worker applied.
    updates = models.IntegerField(default=0)
