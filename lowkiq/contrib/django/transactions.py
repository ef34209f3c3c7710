"""``Worker.perform_async(jobs, on_commit=True, using=None)``: enqueue when the current
Django transaction commits.

The jobs are checked at the call (a bad job raises :class:`~lowkiq.errors.InvalidJob`
there, not at the commit), then handed to ``django.db.transaction.on_commit``: they are
enqueued once the outermost ``atomic()`` block of database ``using`` commits, never when
it rolls back, and a rolled-back savepoint (an inner ``atomic()`` that raised) drops the
jobs given inside it.  Outside any ``atomic()`` block (autocommit) they are enqueued at
once.  The client middlewares run at the commit, around the enqueue itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lowkiq.errors import ConfigurationError
from lowkiq.settings import settings
from lowkiq.storage.enqueueing import max_bulk_len
from lowkiq.storage.jobs import validate_jobs

if TYPE_CHECKING:
    from lowkiq.worker import Worker


def enqueue_on_commit(
    worker: type[Worker],
    jobs: Sequence[dict[str, Any]],
    using: str | None,
    enqueue: Callable[[list[dict[str, Any]]], None],
) -> None:
    """Check ``jobs`` now and have ``enqueue(jobs)`` (``worker``'s client middlewares and
    write) called when the transaction of database ``using`` (default: Django's default
    database) commits.

    Raises :class:`~lowkiq.errors.ConfigurationError` when Django is not installed or
    not configured, and :class:`~lowkiq.errors.InvalidJob` for a bad job; either way
    nothing is registered."""
    transaction = _django_transaction(worker)
    validate_jobs(jobs, settings.dump_payload, lambda: max_bulk_len(settings.client()))
    # Copies of the list and of each job: a caller changing them before the commit does
    # not change what is enqueued (the payloads themselves are serialized at the commit).
    given = [dict(job) for job in jobs]
    transaction.on_commit(lambda: enqueue(given), using=using)


def _django_transaction(worker: type[Worker]) -> Any:
    """``django.db.transaction``, or a :class:`ConfigurationError` saying why it cannot be
    used."""
    call = f"{worker.__name__}.perform_async(jobs, on_commit=True)"
    try:
        from django.conf import settings as django_settings
        from django.db import transaction
    except ImportError:
        raise ConfigurationError(
            f"{call} enqueues when a Django transaction commits, but Django is not "
            "installed (install the lowkiq[django] extra); leave on_commit out to enqueue now"
        ) from None
    if not django_settings.configured:
        raise ConfigurationError(
            f"{call} enqueues when a Django transaction commits, but Django is not "
            "configured (set DJANGO_SETTINGS_MODULE or call django.conf.settings.configure()); "
            "leave on_commit out to enqueue now"
        )
    return transaction
