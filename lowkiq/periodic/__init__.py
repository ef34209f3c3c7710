"""Periodic jobs: ``settings.schedules = [lowkiq.Schedule(Worker, id=..., cron=...)]``.

:mod:`~lowkiq.periodic.schedule` declares and checks a schedule,
:mod:`~lowkiq.periodic.ticks` computes its ticks, and
:mod:`~lowkiq.periodic.runner` is the thread of every ``lowkiq worker`` process
that enqueues them, each tick once (:mod:`lowkiq.storage.schedules`), and
:mod:`~lowkiq.periodic.status` is what the dashboard shows and its "run now".
:mod:`~lowkiq.periodic.control` changes the schedules at run time (pause, resume,
change, add, remove, reset), stored in Redis over ``settings.schedules``
(:mod:`~lowkiq.periodic.overrides` merges the two).  See docs/guides/periodic.md.
"""

from lowkiq.periodic.schedule import Schedule

__all__ = ["Schedule"]
