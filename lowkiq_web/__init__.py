"""The lowkiq dashboard: a Flask blueprint, mountable three ways (SPEC §9).

```python
app.register_blueprint(lowkiq_web, url_prefix="/lowkiq")        # in a Flask app
DispatcherMiddleware(main_wsgi_app, {"/lowkiq": create_app()})   # any WSGI app
# gunicorn 'lowkiq_web:create_app()'                             # standalone
```

Configuration lives in the host app's config: ``LOWKIQ_WEB_READ_ONLY`` (hide
and refuse every action) and ``LOWKIQ_WEB_TRUSTED_ORIGINS`` (extra origins
allowed to POST, e.g. behind a proxy that rewrites ``Host``).  The standalone app
also reads ``LOWKIQ_APP`` (the app to load, as ``-r``), ``LOWKIQ_WEB_URL_PREFIX``
and ``LOWKIQ_WEB_BASIC_AUTH`` (``user:password``) from the environment.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask

from lowkiq_web import (  # noqa: F401  (they register their routes)
    actions,
    errors,
    find,
    history,
    processes,
    rate_limits,
    schedules,
    views,
    workflows,
)
from lowkiq_web.basic_auth import ENV as BASIC_AUTH_ENV
from lowkiq_web.basic_auth import Credentials, guard
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.standalone import add_root_redirect, load_lowkiq_app, url_prefix_of

__all__ = ["create_app", "lowkiq_web"]


def create_app(
    read_only: bool = False,
    *,
    url_prefix: str | None = None,
    basic_auth: str | None = None,
    require: str | None = None,
    **config: Any,
) -> Flask:
    """A standalone Flask app serving only the dashboard, at its root or under
    ``url_prefix`` (default env ``LOWKIQ_WEB_URL_PREFIX``; ``/`` then redirects there).

    ``require`` (default env ``LOWKIQ_APP``): the app to import first, a ``.py`` path
    or a dotted module name, so that the dashboard knows its workers.
    ``basic_auth`` (default env ``LOWKIQ_WEB_BASIC_AUTH``): ``user:password`` every
    request must carry (else 401).  ``read_only`` sets ``LOWKIQ_WEB_READ_ONLY``; other
    keyword arguments are put into ``app.config`` as given.  A bad value raises
    :class:`~lowkiq.errors.LowkiqError`.
    """
    prefix = url_prefix_of(url_prefix)
    credentials = None
    if basic_auth is not None:
        credentials = Credentials.parse(basic_auth, "basic_auth")
    elif os.environ.get(BASIC_AUTH_ENV):
        credentials = Credentials.parse(os.environ[BASIC_AUTH_ENV])
    load_lowkiq_app(require)
    app = Flask(__name__, static_folder=None)
    app.config["LOWKIQ_WEB_READ_ONLY"] = read_only
    app.config[find.STANDALONE] = True
    app.config.update(config)
    if credentials is not None:
        app.before_request(guard(credentials))
    app.register_blueprint(lowkiq_web, url_prefix=prefix)
    if prefix is not None:
        add_root_redirect(app)
    return app
