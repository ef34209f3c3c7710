"""The dashboard as a WSGI app for gunicorn: ``gunicorn -c gunicorn.conf.py wsgi:application``.

It loads the same app as the workers (so it knows their queues) and serves
the dashboard at the root.  ``LOWKIQ_WEB_READ_ONLY=1`` hides and refuses every
action (retry, delete, quiet...): the dashboard has no login of its own, so
put it behind your authentication, or make it read-only.
"""

from __future__ import annotations

import os

import app  # noqa: F401  (sets lowkiq.settings.workers)

from lowkiq_web import create_app

application = create_app(read_only=os.environ.get("LOWKIQ_WEB_READ_ONLY", "") == "1")
