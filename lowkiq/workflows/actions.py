"""``Worker.actions()``: a queue's bulk operations that know of workflows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lowkiq.storage.actions import Actions
from lowkiq.workflows import held, relay


class HeldActions(Actions):
    """``Worker.actions()``: the queue's bulk operations, and its jobs held ``after=``
    workflows (an operator's release or delete).  An action that ends queued jobs tells
    their workflows at once (the scripts noted the members in the shards' outboxes)."""

    def _told(self, result: int) -> int:
        """Relay every shard's outbox (the members the action ended); returns ``result``."""
        relay.relay_many(
            self.queue.client, [(self.queue.name, shard) for shard in self.queue.shards]
        )
        return result

    def delete(self, ids: Iterable[Any]) -> int:
        """See :meth:`Actions.delete`."""
        return self._told(super().delete(ids))

    def cancel(self, ids: Iterable[Any]) -> int:
        """See :meth:`Actions.cancel`."""
        return self._told(super().cancel(ids))

    def kill(self, ids: Iterable[Any]) -> int:
        """See :meth:`Actions.kill`."""
        return self._told(super().kill(ids))

    def clear(self) -> int:
        """See :meth:`Actions.clear`."""
        return self._told(super().clear())

    def kill_all_failed_jobs(self) -> int:
        """See :meth:`Actions.kill_all_failed_jobs`."""
        return self._told(super().kill_all_failed_jobs())

    def delete_all_failed_jobs(self) -> int:
        """See :meth:`Actions.delete_all_failed_jobs`."""
        return self._told(super().delete_all_failed_jobs())

    def delete_all_scheduled_jobs(self) -> int:
        """See :meth:`Actions.delete_all_scheduled_jobs`."""
        return self._told(super().delete_all_scheduled_jobs())

    def delete_group(self, group: Any) -> int:
        """See :meth:`Actions.delete_group`."""
        return self._told(super().delete_group(group))

    def held(self, workflow_id: str) -> list[held.HeldCall]:
        """This queue's calls held by workflow ``workflow_id``."""
        return [
            c for c in held.held_calls(self.queue.client, workflow_id) if c.queue == self.queue.name
        ]

    def release_held(self, workflow_id: str) -> int:
        """Enqueue this queue's calls held by workflow ``workflow_id`` now, whatever its
        status; returns how many calls."""
        return held.each_held(self.queue.client, workflow_id, self.queue.name, push=True)

    def delete_held(self, workflow_id: str) -> int:
        """Delete this queue's calls held by workflow ``workflow_id``; returns how many."""
        return held.each_held(self.queue.client, workflow_id, self.queue.name, push=False)
