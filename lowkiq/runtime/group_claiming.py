"""The dispatcher's round trips for group caps and per-group rates
(:mod:`lowkiq.limits.group_caps`): the claims of the batches a round popped, and the
releases, renewals and questions due between rounds, each set in one write when the
client packs commands.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from lowkiq.clients.connection import Client
from lowkiq.limits.group_caps import GroupCaps
from lowkiq.ownership.assignment import ShardKey
from lowkiq.runtime.shard_handler import ShardHandler, Taken
from lowkiq.storage.group_claims import ClaimCall

log = logging.getLogger("lowkiq.dispatcher")


class GroupClaiming:
    """The group claims' calls through ``client``; ``packs``: whether it sends several
    calls in one write."""

    def __init__(self, client: Client, packs: bool) -> None:
        self.client = client
        self.packs = packs

    def claim(self, popped: list[tuple[ShardHandler, Taken]]) -> list[tuple[ShardHandler, Taken]]:
        """Claim the group places and tokens the popped batches need, in one write; a
        refused batch goes back to its queue unrun.  Returns the pops to dispatch."""
        claims: list[tuple[ShardHandler, GroupCaps, ClaimCall]] = []
        for handler, taken in popped:
            caps = handler.group_caps
            if caps is not None and taken.batches and taken.groups:
                call = caps.claim_call(handler.shard, handler.token, taken.groups)
                if call is not None:
                    claims.append((handler, caps, call))
        if not claims:
            return popped
        try:
            replies = self._run([(caps, call) for _, caps, call in claims])
        except redis.RedisError:
            for handler, _, _ in claims:
                handler.interrupted()  # its batch is restored before its next pop
            raise
        refused: set[ShardKey] = set()
        for (handler, caps, call), reply in zip(claims, replies, strict=True):
            if isinstance(reply, Exception) or not caps.answer(reply):
                refused.add(handler.key)
                handler.give_back()
            else:
                caps.granted(handler.key, call)
        return [(handler, taken) for handler, taken in popped if handler.key not in refused]

    def keep(self, group_caps: Mapping[str, GroupCaps], handlers: Sequence[ShardHandler]) -> None:
        """Send the releases and renewals due of ``group_caps`` (each worker's, by queue
        name), and ask which groups are full while some are, in one write; a place freed
        lets those of ``handlers`` that gave no job pop."""
        calls = [(caps, call) for caps in group_caps.values() for call in caps.upkeep()]
        if not calls:
            return
        full_before = {name: caps.full for name, caps in group_caps.items()}
        try:
            replies = self._run(calls)
        except redis.RedisError:
            for caps in group_caps.values():
                caps.unsent([call for owner, call in calls if owner is caps])
            raise
        for (caps, call), reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):
                caps.unsent([call])
            elif not caps.answer(reply) and call.op == "renew":
                log.warning(
                    "%s: the group places of batch %s lapsed and were taken meanwhile",
                    caps.claims.queue.name, call.who,
                )  # fmt: skip
        freed = {name for name, caps in group_caps.items() if full_before[name] - caps.full}
        for handler in handlers:
            if handler.queue.name in freed:
                handler.not_before = 0.0

    def _run(self, calls: Sequence[tuple[GroupCaps, ClaimCall]]) -> list[Any]:
        """The replies of ``calls`` (in one write when the client packs commands)."""
        if self.packs:
            client: Any = self.client
            return list(client.run_keyed([caps.claims.command(call) for caps, call in calls]))
        return [caps.claims.reply(call) for caps, call in calls]
