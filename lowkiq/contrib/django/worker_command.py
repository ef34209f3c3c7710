"""``manage.py lowkiq_worker``: the ``lowkiq worker`` command (:func:`lowkiq.cli.worker`)
with the same options and implementation, its app being the Django project.

Django is set up before the command runs, so ``lowkiq.settings`` is already configured
from ``settings.LOWKIQ`` (:mod:`lowkiq.contrib.django.apps`): the ``-r/--require``
option is not taken.  Django's own ``--settings`` and ``--pythonpath`` (applied by
``manage.py`` before the command starts) are accepted.
"""

from __future__ import annotations

from typing import Any

import click

from lowkiq.cli import worker as lowkiq_worker

#: What ``lowkiq worker`` loads as its app: this package's app module, already imported
#: (Django imported it and ran its ``ready()``), so loading it changes nothing.
DJANGO_APP = "lowkiq.contrib.django.apps"


def _django_option(name: str) -> click.Option:
    """A ``manage.py`` option the command accepts and leaves to Django."""
    return click.Option([name], hidden=True, expose_value=False, help="Applied by manage.py.")


def worker_command(before_start: Any = None) -> click.Command:
    """``lowkiq worker``'s options and implementation, without ``-r`` (the app is the
    Django project).  ``before_start()`` runs after the options are parsed, before the
    worker starts."""
    params = [param for param in lowkiq_worker.params if param.name != "app"]
    callback = lowkiq_worker.callback
    assert callback is not None

    def run(**options: Any) -> Any:
        if before_start is not None:
            before_start()
        return callback(app=DJANGO_APP, **options)

    return click.Command(
        "lowkiq_worker",
        params=[*params, _django_option("--settings"), _django_option("--pythonpath")],
        callback=run,
        help=(lowkiq_worker.help or "").replace(
            "the workers defined by APP", "the workers of settings.LOWKIQ"
        ),
        context_settings={"max_content_width": 100},
    )
