"""The web side: a FastAPI app whose async endpoints enqueue and read with lowkiq's
awaitable calls, with the dashboard mounted at ``/lowkiq``.

Serve it with ``uvicorn examples.fastapi_app.app:app`` and run the worker beside it
(``lowkiq worker -r examples.fastapi_app.workers``), both on the same ``REDIS_URL``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from examples.fastapi_app.workers import Welcome
from lowkiq.aio.client import close_async_client
from lowkiq_web.asgi import dashboard_asgi_app


class SignUp(BaseModel):
    """A sign-up event of one account."""

    account: str
    email: str


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Close lowkiq's connections of this loop when the server stops."""
    yield
    await close_async_client()


app = FastAPI(lifespan=lifespan)


@app.post("/signups", status_code=202)
async def sign_up(events: list[SignUp]) -> dict[str, int]:
    """Enqueue a welcome per account; events of one account merge into one job."""
    await Welcome.aperform_async(
        [{"id": event.account, "payload": event.model_dump()} for event in events]
    )
    return {"enqueued": len(events)}


@app.get("/signups/{account}")
async def pending(account: str) -> dict[str, Any]:
    """The account's queued welcome, 404 once it ran (or if it never was enqueued)."""
    jobs = await Welcome.aqueries().fetch([account])
    if not jobs:
        raise HTTPException(404, f"no welcome queued for {account!r}")
    return {"account": account, "events": len(jobs[0]["payloads"])}


@app.get("/queue")
async def queue() -> dict[str, Any]:
    """The welcome queue's metrics (length, processed, failed, lag, ...)."""
    return dict(await Welcome.ametrics())


app.mount("/lowkiq", dashboard_asgi_app())
