"""Redis out of reach, for the operator's calls (actions, queries): a lost connection or
a timeout raises :class:`lowkiq.RedisUnavailable`, as ``perform_async`` does, instead of
redis-py's own error."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis
from redis.exceptions import ClusterDownError, RedisClusterException

from lowkiq.errors import RedisUnavailable

#: The errors that mean Redis could not be reached (a cluster with no master for a slot too).
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError, ClusterDownError, RedisClusterException)

Cls = TypeVar("Cls", bound=type)


@contextmanager
def unreachable_raises(what: str) -> Iterator[None]:
    """Raise :class:`RedisUnavailable` naming ``what`` (e.g. ``OrderWorker.actions().kill``)
    when Redis cannot be reached inside the block."""
    try:
        yield
    except UNREACHABLE as exc:
        raise RedisUnavailable(f"{what}: Redis is unreachable: {exc}") from exc


def public_calls_raise_unavailable(kind: str) -> Callable[[Cls], Cls]:
    """A class decorator: each public method of the class (an object with a ``queue``)
    raises :class:`RedisUnavailable` naming ``<queue>.<kind>().<method>`` when Redis is
    out of reach."""

    def decorate(cls: Cls) -> Cls:
        for name, member in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(member):
                setattr(cls, name, _guarded(member, kind))
        return cls

    return decorate


def _guarded(method: Callable[..., Any], kind: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        with unreachable_raises(f"{self.queue.name}.{kind}().{method.__name__}"):
            return method(self, *args, **kwargs)

    return guarded
