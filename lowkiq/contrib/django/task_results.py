"""Where the ``django.tasks`` backend keeps each task's result: one Redis string per
result id, a JSON document, expiring ``RESULT_TTL`` seconds after its last change.

Key: ``lowkiq:django-tasks:result:<id>``.  Document: ``task`` (the task's dotted path),
``backend``, ``queue``, ``run_after``, ``args``, ``kwargs``, ``status`` (a
``TaskResultStatus`` value), ``enqueued_at``, ``started_at``, ``last_attempted_at``,
``finished_at`` (unix times or ``None``), ``errors`` (``exception_class_path``,
``traceback``), ``worker_ids`` and ``return_value``.  One place writes a result at a
time: the enqueue, then the one thread performing its job.
"""

from __future__ import annotations

import json
from typing import Any

from lowkiq.settings import settings

#: Prefix of every result's key.
KEY_PREFIX = "lowkiq:django-tasks:result:"


def key_of(result_id: str) -> str:
    """The Redis key of result ``result_id``."""
    return f"{KEY_PREFIX}{result_id}"


def read(result_id: str) -> dict[str, Any] | None:
    """The stored document of ``result_id``, or ``None`` when there is none (never
    enqueued, or expired)."""
    raw = settings.client().get(key_of(result_id))
    if raw is None:
        return None
    document: dict[str, Any] = json.loads(raw)
    return document


def write(result_id: str, document: dict[str, Any], ttl: float) -> None:
    """Store ``document`` as result ``result_id`` for ``ttl`` seconds."""
    text = json.dumps(document, separators=(",", ":"), sort_keys=True)
    settings.client().set(key_of(result_id), text, px=max(1, round(ttl * 1000)))


def delete(result_id: str) -> None:
    """Forget result ``result_id``."""
    settings.client().delete(key_of(result_id))
