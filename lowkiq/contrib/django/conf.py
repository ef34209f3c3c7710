"""lowkiq's settings from Django's ``settings.LOWKIQ``.

``LOWKIQ`` is a dict.  Its keys are lowkiq's settings, by name (any case:
``"threads_per_node"`` or ``"THREADS_PER_NODE"``; see ``lowkiq.settings``), and:

* ``REDIS_URL``: the Redis to use (``redis://...``, ``rediss://...``, ``unix://...``,
  ``redis+cluster://host:port``); else the ``redis`` setting, a zero-argument factory;
  else lowkiq's default (the ``REDIS_URL`` environment variable, then localhost).
* ``WORKERS``: worker classes or their dotted paths.  Left out: every
  ``lowkiq.Worker`` subclass that an installed app's ``jobs.py`` defines, in
  ``INSTALLED_APPS`` order.  The workers of the ``django.tasks`` backends come after
  them either way (:mod:`lowkiq.contrib.django.apps`).
* ``SCHEDULES``: ``lowkiq.Schedule`` values, or dicts of its arguments whose
  ``worker`` may be a dotted path (``{"worker": "shop.jobs.Digest", "id": "daily",
  "cron": "0 8 * * *"}``).
* Callables (``server_middlewares``' items, ``on_server_init``, ``last_words``, the
  serializers...) may be given as dotted paths too.

Any other key raises ``ImproperlyConfigured`` naming it and the known keys, as does a
bad value (lowkiq's check of that setting, in the message).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

import lowkiq
from lowkiq.clients.connection import check_url, client_from_url
from lowkiq.errors import LowkiqError
from lowkiq.settings import Settings

#: The keys of ``LOWKIQ`` that are not lowkiq settings.
EXTRA_KEYS = frozenset({"redis_url"})
#: Settings whose value is a list of callables, each of which may be a dotted path.
_CALLABLE_LISTS = frozenset({"server_middlewares", "client_middlewares"})


def known_keys() -> list[str]:
    """Every key ``LOWKIQ`` accepts, upper case."""
    names = set(Settings.__dataclass_fields__) - {"_shared"}
    return sorted(name.upper() for name in names | EXTRA_KEYS)


def configure(
    config: Mapping[str, Any],
    discovered_workers: Iterable[type[lowkiq.Worker]] = (),
    target: Settings = lowkiq.settings,
) -> None:
    """Apply ``config`` (the ``LOWKIQ`` dict) to ``target``; ``discovered_workers`` are the
    workers used when it names none.  ``ImproperlyConfigured`` for an unknown key or a
    bad value: then the settings keep what they had before the bad key."""
    if not isinstance(config, Mapping):
        raise ImproperlyConfigured(f"settings.LOWKIQ must be a dict, got {config!r}")
    values = {_name_of(key): value for key, value in config.items()}
    if "redis_url" in values and "redis" in values:
        raise ImproperlyConfigured("settings.LOWKIQ: give REDIS_URL or REDIS, not both")
    values.setdefault("workers", list(discovered_workers))
    # Every value is checked on a scratch object first: a bad one changes nothing.
    for settings in (Settings(), target):
        for name, value in values.items():
            try:
                _apply(settings, name, value)
            except ImproperlyConfigured:
                raise
            except (LowkiqError, ImportError) as exc:
                raise ImproperlyConfigured(f"settings.LOWKIQ[{name.upper()!r}]: {exc}") from exc


def _name_of(key: object) -> str:
    """The lowkiq setting a ``LOWKIQ`` key names, or ``ImproperlyConfigured``."""
    if isinstance(key, str):
        name = key.lower()
        if name in EXTRA_KEYS or name in Settings.__dataclass_fields__ and name != "_shared":
            return name
    raise ImproperlyConfigured(
        f"settings.LOWKIQ has an unknown key {key!r}; known keys: {', '.join(known_keys())}"
    )


def _apply(target: Settings, name: str, value: Any) -> None:
    """Set one setting from its ``LOWKIQ`` value."""
    if name == "redis_url":
        if not isinstance(value, str):
            raise ImproperlyConfigured(
                f"settings.LOWKIQ['REDIS_URL'] must be a string, got {value!r}"
            )
        check_url(value, "settings.LOWKIQ['REDIS_URL']")
        target.redis = lambda: client_from_url(value)
        return
    if name == "workers":
        value = [_resolve(item) for item in _listed(name, value)]
    elif name == "schedules":
        value = [_schedule(item) for item in _listed(name, value)]
    elif name in _CALLABLE_LISTS:
        value = [_resolve(item) for item in _listed(name, value)]
    elif isinstance(value, str) and callable(getattr(target, name)):
        value = import_string(value)
    setattr(target, name, value)


def _listed(name: str, value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise ImproperlyConfigured(
            f"settings.LOWKIQ[{name.upper()!r}] must be a list, got {value!r}"
        )
    return list(value)


def _resolve(item: Any) -> Any:
    """``item``, imported when it is a dotted path."""
    return import_string(item) if isinstance(item, str) else item


def _schedule(item: Any) -> lowkiq.Schedule:
    """A ``Schedule`` from a ``SCHEDULES`` entry: one as is, or a dict of its arguments."""
    if isinstance(item, lowkiq.Schedule):
        return item
    if not isinstance(item, Mapping) or "worker" not in item:
        raise ImproperlyConfigured(
            "settings.LOWKIQ['SCHEDULES']: each entry is a lowkiq.Schedule or a dict of its "
            f"arguments with a 'worker', got {item!r}"
        )
    arguments = dict(item)
    worker = _resolve(arguments.pop("worker"))
    try:
        return lowkiq.Schedule(worker, **arguments)
    except TypeError as exc:
        raise ImproperlyConfigured(f"settings.LOWKIQ['SCHEDULES']: {item!r}: {exc}") from exc


def workers_defined_in(module: ModuleType) -> list[type[lowkiq.Worker]]:
    """The ``lowkiq.Worker`` subclasses ``module`` defines (not those it imports), in the
    order of definition."""
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, lowkiq.Worker)
        and value.__module__ == module.__name__
    ]
