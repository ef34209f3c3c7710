"""Free the shards of a process known to be dead, at once rather than after its TTL.

A supervisor (``lowkiq worker --processes N``) sees a child exit.  Its leases
would hold the child's shards for up to ``lease_ttl`` seconds; instead the
supervisor frees every lease the child holds (``lua/lease_evict.lua``: only a
lease whose token names that process) and deregisters it.  The next
acquisition of each shard takes a new epoch, so whatever the dead process left
in flight stays fenced, and the new owner restores its batch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from lowkiq.clients.connection import Client
from lowkiq.ownership import leases
from lowkiq.ownership.assignment import ShardKey
from lowkiq.ownership.membership import Membership
from lowkiq.storage.keys import OwnershipKeys
from lowkiq.storage.queue import Queue

if TYPE_CHECKING:
    from lowkiq.settings import Settings

log = logging.getLogger("lowkiq.ownership")


def shards_of(client: Client, process_id: str) -> set[ShardKey]:
    """The shards ``process_id`` may hold: those assigned to it, and those it last said
    it held."""
    keys = OwnershipKeys()
    found: set[ShardKey] = set()
    assigned = client.hget(keys.assignment_hash, process_id)
    if assigned:
        for queue, shards in json.loads(assigned).items():
            found.update((queue, shard) for shard in shards)
    info = client.hget(keys.process_hash(process_id), "info")
    if info:
        for name in json.loads(info).get("shards", []):
            queue, _, shard = str(name).rpartition(":")
            found.add((queue, int(shard)))
    return found


def evict(client: Client, process_id: str, queues: Mapping[str, Queue]) -> int:
    """Free the leases of the dead process ``process_id`` on ``queues`` and deregister
    it; returns how many leases were freed."""
    freed = _free(shards_of(client, process_id), process_id, queues)
    Membership(client, process_id, ttl=1.0).leave()
    if freed:
        log.info("freed %d lease(s) of %s, which died", freed, process_id)
    return freed


def _free(shards: Iterable[ShardKey], process_id: str, queues: Mapping[str, Queue]) -> int:
    freed = 0
    for queue_name, shard in sorted(shards):
        queue = queues.get(queue_name)
        if queue is not None and leases.evict(queue, shard, process_id):
            freed += 1
    return freed


def evict_on_death(config: Settings) -> Callable[[str], None]:
    """What a supervisor does when a child dies: free its leases and deregister it, on a
    connection of its own made for that (the supervisor holds none while it forks)."""

    def on_death(process_id: str) -> None:
        client = config.redis()
        try:
            queues = {w.queue_name: w.queue(client, config) for w in config.workers}
            for queue in queues.values():
                queue.refresh_layout()
            evict(client, process_id, queues)
        finally:
            client.close()

    return on_death
