"""``async def perform`` and ``async def retries_exhausted``: each thread's own event loop.

A worker hook may be a coroutine function.  Its coroutine runs to completion
on an event loop that belongs to the calling thread (made on first use, kept
for the thread's life), so clients bound to a loop (asyncpg pools, httpx
async clients) made inside ``perform`` can be reused from one batch to the
next of that thread.  Threads never share a loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from typing import Any

log = logging.getLogger("lowkiq.coroutines")

_local = threading.local()


def thread_loop() -> asyncio.AbstractEventLoop:
    """The calling thread's event loop for worker coroutines (made on first use)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
    return loop


def resolved(result: Any) -> Any:
    """``result`` itself, or, when a hook returned an awaitable, what it resolves to
    after it ran on the thread's loop."""
    if result is None or not inspect.isawaitable(result):
        return result
    return thread_loop().run_until_complete(_awaited(result))


def call_retries_exhausted(worker: Any, jobs: list[dict[str, Any]], name: str) -> None:
    """``worker.retries_exhausted(jobs)``, an ``async def`` one run on the thread's loop;
    what it raises is logged (under ``name``), not raised: the jobs are in the morgue."""
    try:
        resolved(worker.retries_exhausted(jobs))
    except Exception:
        log.exception("%s: retries_exhausted raised", name)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def close_thread_loop() -> None:
    """Close the calling thread's loop, if it made one (the thread is ending)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        return
    _local.loop = None
    try:
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
