"""Fleet-wide rate limits: ``rate_limit = lowkiq.RateLimit(100, per=1.0)`` on a worker.

At most ``jobs`` jobs (ids) of the worker start per ``per`` seconds, summed over
every process and host: each popped id spends a token of a token bucket kept in
Redis, on Redis's clock (:mod:`lowkiq.storage.rate_bucket`).  ``burst`` is the
bucket's size, how many jobs may start at once after a quiet spell.

``per_group=True`` limits each group of the worker's jobs instead (the jobs without
a group are one group): at most ``jobs`` jobs of one group start per ``per`` seconds
over the fleet, and the worker as a whole has no limit.  A batch takes its groups'
tokens in the worker's claims slot after its pop, all or none
(:mod:`lowkiq.storage.group_claims`); a pop skips the groups out of tokens.

A limit set at run time (:func:`set_rate_limit`, ``lowkiq rate-limit``, the
dashboard) overrides the class's on every process within a heartbeat, without a
restart, until it is cleared (:func:`clear_rate_limit`); it lives in a hash in
Redis like the paused queues (:mod:`lowkiq.storage.pausing`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from lowkiq.clients.connection import Client
from lowkiq.errors import ConfigurationError
from lowkiq.storage.config_version import nudge_all
from lowkiq.storage.keys import OwnershipKeys
from lowkiq.storage.rate_bucket import bucket_state, group_buckets_state

_KEYS = OwnershipKeys()

#: Seconds of the limit's rate that make the default burst (at least one batch).
DEFAULT_BURST_SECONDS = 0.05
#: The stored value of a run-time setting that lifts the class's limit.
UNLIMITED = "none"

_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0}
_UNITS |= {"h": 3600.0, "hour": 3600.0}
_TEXT = re.compile(r"^\s*([0-9.]+)\s*/\s*([0-9.]*)\s*([a-z]+)(\s+per\s+group)?\s*$")


@dataclass(frozen=True)
class RateLimit:
    """At most ``jobs`` jobs (ids) started per ``per`` seconds across the fleet;
    ``burst`` jobs may start at once after a quiet spell (default: the jobs of
    :data:`DEFAULT_BURST_SECONDS` of the rate, at least one batch); with
    ``per_group``, so many of each group of the worker's jobs (see the module)."""

    jobs: float
    per: float = 1.0
    burst: int | None = None
    per_group: bool = False

    def __post_init__(self) -> None:
        for name in ("jobs", "per"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigurationError(f"RateLimit {name} must be a number > 0, got {value!r}")
            if not (value > 0 and math.isfinite(value)):
                raise ConfigurationError(f"RateLimit {name} must be a number > 0, got {value!r}")
        burst = self.burst
        if burst is not None and (
            isinstance(burst, bool) or not isinstance(burst, int) or burst < 1
        ):
            raise ConfigurationError(f"RateLimit burst must be an integer >= 1, got {burst!r}")
        if not isinstance(self.per_group, bool):
            raise ConfigurationError(
                f"RateLimit per_group must be True or False, got {self.per_group!r}"
            )

    @property
    def per_second(self) -> float:
        """Jobs started per second."""
        return self.jobs / self.per

    def capacity(self, batch_size: int) -> int:
        """The bucket's size for a worker of ``batch_size``: ``burst``, or by default
        :data:`DEFAULT_BURST_SECONDS` of the rate, at least one batch."""
        if self.burst is not None:
            return self.burst
        return max(batch_size, math.ceil(self.per_second * DEFAULT_BURST_SECONDS))

    def describe(self) -> str:
        """``100/s``, ``6/min (burst 2)``, ``5/1.5s``: the limit for people (and
        :meth:`parse`)."""
        per = {1.0: "s", 60.0: "min", 3600.0: "h"}.get(self.per, f"{self.per:g}s")
        text = f"{self.jobs:g}/{per}" + (" per group" if self.per_group else "")
        return text if self.burst is None else f"{text} (burst {self.burst})"

    def encode(self) -> str:
        """The limit as stored in Redis: ``jobs per burst`` (``burst`` empty: default),
        then `` group`` for a per-group limit."""
        text = f"{self.jobs!r} {self.per!r} {'' if self.burst is None else self.burst}"
        return text + " group" if self.per_group else text

    @classmethod
    def decode(cls, text: str) -> RateLimit | None:
        """A limit :meth:`encode` stored, or ``None`` for :data:`UNLIMITED`."""
        if text == UNLIMITED:
            return None
        jobs, per, burst, group = (text.split(" ") + ["", "", ""])[:4]
        return cls(float(jobs), float(per), int(burst) if burst else None, group == "group")

    @classmethod
    def parse(cls, text: str, burst: int | None = None) -> RateLimit:
        """``100/s``, ``100/1.5s``, ``6000/min``, ``10/h``, ``10/s per group``: a limit
        typed by a person; :class:`ConfigurationError` when it is not one."""
        match = _TEXT.match(text.lower())
        if not match or match.group(3) not in _UNITS:
            raise ConfigurationError(
                f"a rate limit is jobs/period, such as 100/s, 100/1.5s, 6000/min, 10/h or "
                f"10/s per group; "
                f"got {text!r}"
            )
        try:
            jobs = float(match.group(1))
            count = float(match.group(2)) if match.group(2) else 1.0
        except ValueError:
            raise ConfigurationError(f"not a rate limit: {text!r}") from None
        if jobs.is_integer():
            jobs = int(jobs)
        return cls(jobs, count * _UNITS[match.group(3)], burst, match.group(4) is not None)


@dataclass(frozen=True)
class RateLimitStatus:
    """A worker's rate limit as the dashboard and Prometheus show it."""

    #: The limit in force (``None``: none).
    limit: RateLimit | None
    #: The class's ``rate_limit``.
    code: RateLimit | None
    #: Whether a limit set at run time overrides the class's.
    overridden: bool
    #: How many times a shard had to wait for tokens (fleet-wide, all time).
    waited: int
    #: Tokens reserved so far (jobs started under a limit, give or take a batch per shard).
    taken: int
    #: Seconds the shards' reservations run ahead of the refill now (0: tokens are free).
    ahead: float
    #: Under a per-group limit (whose counts ``waited`` and ``taken`` are then, over
    #: every group: claims refused for a group out of tokens, tokens spent), the groups
    #: out of tokens now.
    dry_groups: int = 0


def rate_limit_status(
    client: Client,
    queue_name: str,
    code: RateLimit | None,
    overrides: dict[str, RateLimit | None] | None = None,
) -> RateLimitStatus:
    """The rate limit of ``queue_name`` (whose class declares ``code``) and its bucket
    (a per-group limit: its groups' buckets); ``overrides``: :func:`rate_limit_overrides`,
    when just read."""
    if overrides is None:
        overrides = rate_limit_overrides(client)
    limit = overrides.get(queue_name, code)
    overridden = queue_name in overrides
    if limit is not None and limit.per_group:
        groups = group_buckets_state(client, queue_name)
        return RateLimitStatus(
            limit, code, overridden, groups.waited, groups.taken, 0.0, groups.dry
        )
    per_second = limit.per_second if limit is not None else None
    state = bucket_state(client, queue_name, per_second)
    ahead = -state.tokens / per_second if per_second and state.tokens < 0 else 0.0
    return RateLimitStatus(limit, code, overridden, state.waited, state.taken, ahead)


def check_rate_limit(owner: str, value: object) -> RateLimit | None:
    """``value`` as a worker's ``rate_limit`` (``None``: no limit); a clear error naming
    ``owner`` otherwise."""
    if value is None or isinstance(value, RateLimit):
        return value
    raise ConfigurationError(
        f"{owner}.rate_limit must be a lowkiq.RateLimit or None, got {value!r}"
    )


def set_rate_limit(client: Client, queue_name: str, limit: RateLimit | None) -> None:
    """Limit ``queue_name`` to ``limit`` on every process (``None``: no limit at all),
    overriding its class's ``rate_limit`` until :func:`clear_rate_limit`."""
    value = UNLIMITED if limit is None else limit.encode()
    client.hset(_KEYS.rate_limits_hash, queue_name, value)
    nudge_all(client)


def clear_rate_limit(client: Client, queue_name: str) -> bool:
    """Go back to the class's ``rate_limit`` on every process; ``False`` when no limit
    was set at run time."""
    removed = bool(client.hdel(_KEYS.rate_limits_hash, queue_name))
    nudge_all(client)
    return removed


def rate_limit_overrides(client: Client) -> dict[str, RateLimit | None]:
    """The limits set at run time: queue name -> limit (``None``: lifted)."""
    overrides: dict[str, RateLimit | None] = {}
    for name, value in client.hgetall(_KEYS.rate_limits_hash).items():
        name = name.decode() if isinstance(name, bytes) else name
        value = value.decode() if isinstance(value, bytes) else value
        try:
            overrides[name] = RateLimit.decode(value)
        except (ValueError, ConfigurationError):
            continue  # not written by lowkiq: the class's limit holds
    return overrides
