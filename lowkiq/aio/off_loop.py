"""Work of a large call done off the event loop: checking and planning a few thousand
jobs is pure Python for milliseconds on end, during which the loop would serve no one.

A call of at least :data:`OFF_LOOP_JOBS` jobs runs that work on a thread of the loop's
default executor; Python's GIL then hands the loop its turn every switch interval
(5 ms by default) instead of after the whole call.  A smaller call runs it in place: a
thread's hop would cost it more than the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Calls of at least so many jobs are checked and planned off the loop.
OFF_LOOP_JOBS = 100


async def run_sized(size: int, work: Callable[[], T]) -> T:
    """``work()`` for a call of ``size`` jobs: in place, or off the loop (see the module)."""
    if size < OFF_LOOP_JOBS:
        return work()
    return await asyncio.to_thread(work)
