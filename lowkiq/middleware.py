"""Middleware chains: ``mw(worker, value, call_next)`` wrapped around a final call.

Client middlewares wrap ``perform_async`` (the value is the list of jobs),
server middlewares wrap ``perform`` (the value is the batch
``{id: [payload, ...]}``).  The first middleware of a list is the outermost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from lowkiq.worker import Worker

W = TypeVar("W")
V = TypeVar("V")

#: A batch handed to ``perform``: ``{id: [payload, ...]}``, payloads ascending by score.
Batch = dict[str, list[Any]]
#: ``call_next(worker, value)`` runs the rest of a chain.
Next = Callable[[W, V], Any]
#: ``mw(worker, jobs, call_next)`` around ``perform_async``.
ClientMiddleware = Callable[["type[Worker]", Sequence[dict[str, Any]], Next[Any, Any]], Any]
#: ``mw(worker, batch, call_next)`` around ``perform``.
ServerMiddleware = Callable[["type[Worker]", Batch, Next[Any, Any]], Any]


def chain(
    middlewares: Sequence[Callable[[W, V, Next[W, V]], Any]], final: Next[W, V]
) -> Next[W, V]:
    """``final`` wrapped in ``middlewares``, the first outermost; call it as ``(worker, value)``."""

    def wrap(call_next: Next[W, V], mw: Callable[[W, V, Next[W, V]], Any]) -> Next[W, V]:
        return lambda worker, value: mw(worker, value, call_next)

    return reduce(wrap, reversed(middlewares), final)
