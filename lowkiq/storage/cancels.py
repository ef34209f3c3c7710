"""Cancel ids (``Worker.actions().cancel``): their queued jobs are deleted, and their
running batches are announced to every process, whichever performs them.

Per shard, one script (``lua/jobs_cancel.lua``) deletes what is queued of the ids and
names those in the shard's processing area with the number of the batch there; then
one script on the ownership keys (``lua/cancel_announce.lua``) adds one entry per such
batch to the cancels stream and nudges every process, whose coordinator reads the
new entries at once (:mod:`lowkiq.ownership.cancels`) and flags its batches: their
``current_batch().should_stop()`` turns true, and once their perform ends the
cancelled jobs leave the processing area as cancelled (``lua/cancel_settle.lua``).
While no cancel is made this costs no Redis call per job, batch or beat: a process
looks at the stream when the config version its beat already reads moved, and at its
periodic full reading of the run-time settings (every 30 s).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lowkiq.storage.keys import OwnershipKeys
from lowkiq.storage.scripts import Scripts

if TYPE_CHECKING:
    from lowkiq.storage.actions import Actions

#: Milliseconds a cancel's entries stay in the cancels stream: every live process reads
#: them within a beat of the nudge (or, should the nudge be lost, at its next full
#: config reading, every 30 s); a batch they name is then flagged for as long as it runs.
CANCEL_KEEP_MS = 10 * 60 * 1000

_KEYS = OwnershipKeys()


@dataclass
class CancelResult:
    """What a cancel found: the ids whose queued jobs it deleted, and per shard the
    batch running some of the ids (``(shard, batch) -> ids``)."""

    deleted: set[str] = field(default_factory=set)
    running: dict[tuple[int, int], list[str]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """How many ids were queued or running."""
        return len(self.deleted | {i for ids in self.running.values() for i in ids})


def _text(member: Any) -> str:
    return member.decode() if isinstance(member, bytes) else str(member)


def cancel(actions: Actions, ids: Iterable[Any]) -> int:
    """Cancel ``ids`` of the actions' queue (see :meth:`Actions.cancel`); returns how many
    of them were queued or running."""
    result = CancelResult()
    queue = actions.queue

    def act(shard: int, chunk: list[str]) -> tuple[list[str], list[str]]:
        deleted, moving, running, batch = queue.run("jobs_cancel", shard, *chunk)
        done = [_text(i) for i in deleted]
        result.deleted.update(done)
        if running:
            found = result.running.setdefault((shard, int(batch)), [])
            found += [i for i in map(_text, running) if i not in found]
            done += [_text(i) for i in running]
        return done, [_text(i) for i in moving]

    actions._per_id(ids, act)
    if result.running:
        announce(actions, result)
    return result.count


def announce(actions: Actions, result: CancelResult) -> None:
    """Add the running batches of ``result`` to the cancels stream and nudge every
    process (one script call)."""
    args: list[Any] = [actions.queue.name, CANCEL_KEEP_MS]
    for (shard, batch), ids in sorted(result.running.items()):
        args += [shard, batch, "\0".join(ids)]
    Scripts.for_client(actions.client).cancel_announce(keys=[_KEYS.prefix], args=args)
