"""The lowkiq dashboard: a Flask blueprint, mountable three ways (SPEC §9).

```python
app.register_blueprint(lowkiq_web, url_prefix="/lowkiq")        # in a Flask app
DispatcherMiddleware(main_wsgi_app, {"/lowkiq": create_app()})   # any WSGI app
# gunicorn 'lowkiq_web:create_app()'                             # standalone
```

Configuration lives in the host app's config: ``LOWKIQ_WEB_READ_ONLY`` (hide
and refuse every action) and ``LOWKIQ_WEB_TRUSTED_ORIGINS`` (extra origins
allowed to POST, e.g. behind a proxy that rewrites ``Host``).
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from lowkiq_web import (  # noqa: F401  (they register their routes)
    actions,
    errors,
    history,
    processes,
    rate_limits,
    schedules,
    views,
)
from lowkiq_web.blueprint import lowkiq_web

__all__ = ["create_app", "lowkiq_web"]


def create_app(read_only: bool = False, **config: Any) -> Flask:
    """A standalone Flask app serving only the dashboard, at its root.

    ``read_only`` sets ``LOWKIQ_WEB_READ_ONLY``; other keyword arguments are
    put into ``app.config`` as given.
    """
    app = Flask(__name__, static_folder=None)
    app.config["LOWKIQ_WEB_READ_ONLY"] = read_only
    app.config.update(config)
    app.register_blueprint(lowkiq_web)
    return app
