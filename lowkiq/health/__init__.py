"""Health of a ``lowkiq worker`` process: heartbeats its loops stamp, the ``/live`` and
``/ready`` verdicts drawn from them, and the HTTP port that serves them.

* :mod:`lowkiq.health.heartbeats`: the stamps (no Redis);
* :mod:`lowkiq.health.verdicts`: live and ready, with their reasons and facts;
* :mod:`lowkiq.health.http`: ``lowkiq worker --health-port``;
* :mod:`lowkiq.health.host`: this host's processes, read from the membership, for
  ``lowkiq status`` and ``lowkiq quiet`` (their commands: :mod:`lowkiq.cli.health`).
"""

from lowkiq.health.heartbeats import Heartbeats

__all__ = ["Heartbeats"]
