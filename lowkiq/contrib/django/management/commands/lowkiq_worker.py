"""``manage.py lowkiq_worker [OPTIONS]``: process the queues of ``settings.LOWKIQ``'s
workers, with ``lowkiq worker``'s options (``manage.py lowkiq_worker --help``)."""

from __future__ import annotations

import os
from typing import Any

from django import db
from django.core.management.base import BaseCommand, CommandParser

from lowkiq.contrib.django.worker_command import worker_command


class Command(BaseCommand):
    """Run a lowkiq worker process in the Django project."""

    help = "Process the queues of the workers of settings.LOWKIQ (lowkiq worker's options)."

    def run_from_argv(self, argv: list[str]) -> None:
        """Parse the options with ``lowkiq worker``'s own (click) and run it."""
        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        worker_command(self._before_start).main(args=argv[2:], prog_name=prog)

    def add_arguments(self, parser: CommandParser) -> None:
        """``call_command("lowkiq_worker", "--", "--threads", "2")``: the options as strings."""
        parser.add_argument("worker_args", nargs="*", help="lowkiq worker's options")

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the worker with ``lowkiq worker``'s options given as strings."""
        worker_command(self._before_start).main(
            args=list(options["worker_args"]), prog_name="lowkiq_worker"
        )

    def _before_start(self) -> None:
        """Django's system checks, then no database connection left open (a forked worker
        process must not share its parent's)."""
        self.check()
        db.connections.close_all()
