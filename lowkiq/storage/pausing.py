"""Pause and resume a worker's queue on every process (``lowkiq pause OrderWorker``).

The paused queues' names are a set in Redis.  Every ``lowkiq worker`` process
reads it on each heartbeat, and at once when pausing or resuming nudges the
live processes: a paused queue's shards keep their leases but their threads
take no new batch (a running batch finishes) and stop watching them, so an
idle paused queue costs no CPU.  Enqueueing goes on; the jobs wait.
"""

from __future__ import annotations

from lowkiq.clients.connection import Client
from lowkiq.storage.config_version import nudge_all
from lowkiq.storage.keys import OwnershipKeys

_KEYS = OwnershipKeys()


def pause(client: Client, queue_name: str) -> bool:
    """Pause ``queue_name`` on every process; ``False`` when it was paused already."""
    added = bool(client.sadd(_KEYS.paused_set, queue_name))
    nudge_all(client)
    return added


def resume(client: Client, queue_name: str) -> bool:
    """Resume ``queue_name`` on every process; ``False`` when it was not paused."""
    removed = bool(client.srem(_KEYS.paused_set, queue_name))
    nudge_all(client)
    return removed


def paused_queues(client: Client) -> frozenset[str]:
    """The names of the paused queues."""
    names = client.smembers(_KEYS.paused_set)
    return frozenset(name.decode() if isinstance(name, bytes) else name for name in names)
