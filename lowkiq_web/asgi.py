"""The dashboard as an ASGI app, to mount in FastAPI or Starlette (lowkiq's ``[fastapi]``
extra: ``a2wsgi``).

```python
from fastapi import FastAPI
from lowkiq_web.asgi import dashboard_asgi_app

app = FastAPI()
app.mount("/lowkiq", dashboard_asgi_app())
```

The dashboard stays the Flask app :func:`lowkiq_web.create_app` makes; ``a2wsgi``'s
``WSGIMiddleware`` serves it from the ASGI server, running each request on a thread of
its own pool (``threads``), so the event loop never waits on the dashboard's Redis reads.
The mount's path reaches Flask as ``SCRIPT_NAME``: every link, form and cookie of the
dashboard is under it.
"""

from __future__ import annotations

from typing import Any

from lowkiq_web import create_app


def dashboard_asgi_app(threads: int = 10, **options: Any) -> Any:
    """The dashboard (``create_app(**options)``: ``read_only``, ``basic_auth``, ``require``,
    config keys) as an ASGI app, served by ``threads`` threads.  Mount it where it
    should live (``app.mount("/lowkiq", ...)``), not with a ``url_prefix``."""
    try:
        from a2wsgi import WSGIMiddleware
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "lowkiq_web.asgi needs a2wsgi: install lowkiq with its [fastapi] extra "
            "(pip install '<lowkiq>[fastapi]', <lowkiq> being your clone or lowkiq's git "
            "URL), or a2wsgi"
        ) from exc
    return WSGIMiddleware(create_app(**options), workers=threads)  # type: ignore[arg-type]
