"""The Django app ``"lowkiq.contrib.django"`` (label ``lowkiq``): when Django starts, it
imports every installed app's ``jobs.py`` module, configures ``lowkiq.settings`` from
``settings.LOWKIQ`` (:mod:`lowkiq.contrib.django.conf`) and installs the server
middleware that closes Django's database connections around every batch
(:mod:`lowkiq.contrib.django.connections`)."""

from __future__ import annotations

import sys
from types import ModuleType

from django.apps import AppConfig, apps
from django.conf import settings
from django.utils.module_loading import autodiscover_modules, import_string

import lowkiq
from lowkiq.contrib.django.conf import configure, workers_defined_in
from lowkiq.contrib.django.connections import close_old_connections

#: The module every installed app may define its workers in.
JOBS_MODULE = "jobs"


class LowkiqConfig(AppConfig):
    """Configures lowkiq from ``settings.LOWKIQ`` once the apps are loaded."""

    name = "lowkiq.contrib.django"
    label = "lowkiq"
    verbose_name = "lowkiq"
    default = True

    def ready(self) -> None:
        """Import the apps' ``jobs.py``, apply ``settings.LOWKIQ``, install the middleware."""
        discovered = [
            worker for module in discover_jobs_modules() for worker in workers_defined_in(module)
        ]
        task_workers = task_backend_workers()
        configure(getattr(settings, "LOWKIQ", {}), [*discovered, *task_workers])
        # A WORKERS list given without the tasks backend's: they are served all the same.
        missing = [worker for worker in task_workers if worker not in lowkiq.settings.workers]
        if missing:
            lowkiq.settings.workers = [*lowkiq.settings.workers, *missing]
        middlewares = lowkiq.settings.server_middlewares
        if close_old_connections not in middlewares:
            lowkiq.settings.server_middlewares = [close_old_connections, *middlewares]


def discover_jobs_modules() -> list[ModuleType]:
    """Import the ``jobs`` module of every installed app that has one; return them in
    ``INSTALLED_APPS`` order."""
    autodiscover_modules(JOBS_MODULE)
    found = (sys.modules.get(f"{config.name}.{JOBS_MODULE}") for config in apps.get_app_configs())
    return [module for module in found if module is not None]


def task_backend_workers() -> list[type[lowkiq.Worker]]:
    """The workers of the ``settings.TASKS`` backends that are lowkiq's
    (:class:`lowkiq.contrib.django.tasks.LowkiqBackend`): one per queue name."""
    found: list[type[lowkiq.Worker]] = []
    for alias, params in (getattr(settings, "TASKS", None) or {}).items():
        path = params.get("BACKEND") if isinstance(params, dict) else None
        try:
            backend = import_string(path) if isinstance(path, str) else None
        except ImportError:  # the tasks framework reports it when the backend is used
            continue
        workers_for = getattr(backend, "lowkiq_workers", None)
        if callable(workers_for):
            found.extend(workers_for(alias, params))
    return found
