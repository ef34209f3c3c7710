"""A worker's groups as set at run time: paused groups, and a group's own concurrency
cap and rate limit instead of the worker's (``Worker.group_concurrency``, a per-group
``rate_limit``).

They live in one small hash per queue in the queue's claims slot,
``lowkiq:{name:groups}:limits``, field ``<setting>:<group>``: ``paused:<g>`` = ``1``,
``cap:<g>`` = the cap, ``rate:<g>`` = the limit as :meth:`RateLimit.encode` stores it.
The claims script reads a group's cap and rate there, in the same call that claims its
places (``lua/group_claims.lua``), so a cap set at run time is exact fleet-wide from
the moment it is written.  Every change bumps the config version and nudges every live
process (as pausing a queue does): each reads the hash again at once, and its pops skip
the paused groups (:mod:`lowkiq.limits.group_caps`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lowkiq.clients.connection import Client
from lowkiq.storage.config_version import nudge_all
from lowkiq.storage.keys import QueueKeys

#: The settings a group may have, as the prefixes of their fields.
PAUSED, CAP, RATE = "paused", "cap", "rate"


@dataclass(frozen=True)
class GroupLimits:
    """What was set at run time for one group (``None``: the worker's own setting)."""

    #: Whether the group's jobs are kept from starting (running batches finish).
    paused: bool = False
    #: The most batches of the group running at once over the fleet, instead of
    #: ``Worker.group_concurrency``.
    concurrency: int | None = None
    #: The most jobs of the group started per period, instead of the worker's per-group
    #: ``rate_limit`` (``RateLimit.encode`` text; see :func:`decode_rate`).
    rate: str | None = None

    @property
    def limited(self) -> bool:
        """Whether the group's batches claim places or tokens for this setting."""
        return self.concurrency is not None or self.rate is not None


def limits_key(keys: QueueKeys) -> str:
    """``lowkiq:{name:groups}:limits``: the queue's groups set at run time."""
    return keys.group_claims_prefix + "limits"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def parse_fields(fields: Mapping[Any, Any]) -> dict[str, GroupLimits]:
    """The groups of a limits hash read whole (HGETALL): group -> its settings.  A field
    lowkiq did not write is left out."""
    found: dict[str, dict[str, Any]] = {}
    for raw_field, raw_value in fields.items():
        setting, _, group = _text(raw_field).partition(":")
        value = _text(raw_value)
        if not group:
            continue
        if setting == PAUSED:
            found.setdefault(group, {})["paused"] = True
        elif setting == CAP and value.isdigit() and int(value) >= 1:
            found.setdefault(group, {})["concurrency"] = int(value)
        elif setting == RATE and value:
            found.setdefault(group, {})["rate"] = value
    return {group: GroupLimits(**settings) for group, settings in found.items()}


def read_limits(client: Client, keys: QueueKeys) -> dict[str, GroupLimits]:
    """Every group of the queue with a run-time setting: group -> its settings."""
    return parse_fields(client.hgetall(limits_key(keys)))


def read_many(client: Client, keys: Iterable[QueueKeys]) -> list[dict[str, GroupLimits]]:
    """:func:`read_limits` of several queues, pipelined (one round trip on one server)."""
    pipe = client.pipeline(transaction=False)
    chosen = list(keys)
    for queue_keys in chosen:
        pipe.hgetall(limits_key(queue_keys))
    return [parse_fields(fields) for fields in pipe.execute()]


def write(
    client: Client,
    keys: QueueKeys,
    group: str,
    put: Mapping[str, str],
    drop: Iterable[str] = (),
) -> int:
    """Set the settings ``put`` (setting -> stored value) of ``group`` and delete those
    named in ``drop``, then tell every process; returns how many fields were added or
    deleted."""
    key = limits_key(keys)
    changed = 0
    if put:
        fields: dict[Any, Any] = {f"{setting}:{group}": value for setting, value in put.items()}
        changed += int(client.hset(key, mapping=fields))
    dropped = [f"{setting}:{group}" for setting in drop]
    if dropped:
        changed += int(client.hdel(key, *dropped))
    nudge_all(client)
    return changed
