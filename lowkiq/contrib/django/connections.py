"""Django's database connections around every batch, as around every request.

A Django request starts and ends with ``django.db.close_old_connections()``: a
connection past ``CONN_MAX_AGE`` (0 by default: every one) or one that an error left
unusable is closed, and the next query opens a new one.  A ``lowkiq worker`` process
has no requests, and its executor threads live as long as the process, so without this
each thread would keep its connection for ever, however long idle, and a connection
the database dropped (a restart, a failover, an idle timeout) would fail every later
batch of that thread.  :func:`close_old_connections` is a server middleware doing what
a request does, before and after each batch; the app installs it
(:mod:`lowkiq.contrib.django.apps`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import db

from lowkiq.middleware import Batch, Next

if TYPE_CHECKING:
    from lowkiq.worker import Worker


def close_old_connections(worker: type[Worker], batch: Batch, call_next: Next[Any, Any]) -> Any:
    """A server middleware: ``django.db.close_old_connections()`` before and after the batch
    (after it even when ``perform`` raised)."""
    db.close_old_connections()
    try:
        return call_next(worker, batch)
    finally:
        db.close_old_connections()
