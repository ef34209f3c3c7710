"""Run each batch inside a Flask application context.

Flask-SQLAlchemy's session, ``flask.g``, ``current_app`` and anything else
bound to the app context are set up before ``perform`` and torn down after it
(``teardown_appcontext`` runs, the session is removed), once per batch::

    from lowkiq.integrations.flask import app_context
    lowkiq.settings.server_middlewares = [app_context(app)]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lowkiq.middleware import Batch, Next, ServerMiddleware

if TYPE_CHECKING:
    from flask import Flask

    from lowkiq.worker import Worker


def app_context(app: Flask) -> ServerMiddleware:
    """A server middleware that performs every batch inside ``app.app_context()``."""

    def in_app_context(worker: type[Worker], batch: Batch, call_next: Next[Any, Any]) -> Any:
        with app.app_context():
            return call_next(worker, batch)

    return in_app_context
