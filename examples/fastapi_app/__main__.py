"""Serve the example on http://127.0.0.1:8000 (``python -m examples.fastapi_app``); start
``lowkiq worker -r examples.fastapi_app.workers`` beside it."""

from __future__ import annotations

import uvicorn

uvicorn.run("examples.fastapi_app.app:app", host="127.0.0.1", port=8000)
