"""What a workflow's members did: :class:`WorkflowStatus`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """A workflow's members by state, and whether it is complete.

    ``pending`` members are queued or running and never failed; ``failed`` ones failed
    and wait for a retry; ``done``, ``dead`` (buried) and ``discarded`` (``Discard``,
    deleted, cancelled) ones ended.  ``complete`` once the workflow is closed (its
    ``with`` block ended) and every member ended; ``succeeded`` when complete with no
    member dead and not cancelled.
    """

    pending: int = 0
    done: int = 0
    failed: int = 0
    dead: int = 0
    discarded: int = 0
    complete: bool = False
    succeeded: bool = False

    @property
    def total(self) -> int:
        """Every member so far."""
        return self.pending + self.done + self.failed + self.dead + self.discarded

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (the callbacks' ``status``)."""
        return asdict(self)


def status_of(state: dict[str, str]) -> WorkflowStatus:
    """The status of a workflow's state hash (decoded), as the scripts keep it."""

    def count(name: str) -> int:
        return int(state.get(name) or 0)

    done, failed, dead, discarded = (
        count("done"),
        count("failed"),
        count("dead"),
        count("discarded"),
    )
    # Open: the members known so far are those that ended or failed.
    total = count("total") if "total" in state else done + failed + dead + discarded
    complete = state.get("status") == "complete"
    return WorkflowStatus(
        pending=max(0, total - done - failed - dead - discarded),
        done=done,
        failed=failed,
        dead=dead,
        discarded=discarded,
        complete=complete,
        succeeded=complete and state.get("succeeded") == "1",
    )
