"""A real coordinator whose dispatcher is a stand-in: ownership tests drive it by hand
without the processing runtime."""

from __future__ import annotations

from typing import Any

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.ownership.assignment import ShardKey
from lowkiq.ownership.coordinator import Coordinator, Plan
from lowkiq.ownership.events import Change, Grant
from lowkiq.ownership.membership import Membership, membership_ttl
from lowkiq.runtime.shard_handler import ShardHandler


class StandInDispatcher:
    """A dispatcher that serves nothing; a shard asked back is given up at once."""

    busy = 0

    def __init__(self) -> None:
        self.handlers: dict[ShardKey, ShardHandler] = {}

    def tell(self, change: Change) -> None:
        if isinstance(change, Grant):
            handler = change.handler
            self.handlers[(handler.queue.name, handler.shard)] = handler
        else:
            self.handlers.pop(change.key, None)

    def pause(self, queues: frozenset[str]) -> None:
        pass

    def wake(self, client: Any) -> None:
        pass

    def running_batches(self) -> list[dict[str, object]]:
        return []


def coordinator_of(
    client: Client,
    process_id: str,
    worker: type[lowkiq.Worker],
    lease_ttl: float,
    heartbeat_interval: float,
    **options: Any,
) -> Coordinator:
    """A coordinator whose stand-in dispatcher serves ``worker``'s queue on ``client``;
    ``options`` go to :class:`Coordinator` (``renewal_client``)."""
    queue = worker.queue(client)
    return Coordinator(
        client,
        Membership(client, process_id, membership_ttl(lease_ttl, heartbeat_interval)),
        [queue],
        Plan(),
        StandInDispatcher(),
        lambda name, shard, token, on_lost: ShardHandler(
            worker, shard, queue, token, on_lost=on_lost
        ),
        lease_ttl,
        heartbeat_interval,
        1,
        **options,
    )
