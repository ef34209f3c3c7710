"""The job page's Events: what a tracked worker (``Worker.track``) recorded of one id,
newest first, in plain words (see :mod:`lowkiq.storage.job_events` for the events)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import lowkiq
from lowkiq import JobEvent

#: Events shown on a job page: the newest ones.
EVENTS_SHOWN = 200

#: Detail fields an event row shows in its own way (the rest show as ``name=value``).
SHOWN_DETAILS = frozenset(
    {
        "perform_in",
        "retry_count",
        "error",
        "from",
        "to",
        "left",
        "merged",
        "group",
        "reason",
        "times",
        "once",
    }
)
#: A batch its group had no place (or token) for goes back unrun: the reason of its
#: ``restored`` events, which the timeline folds.
GROUP_FULL = "group_full"


@dataclass(frozen=True)
class Timeline:
    """The events of one id the page shows, newest first, and how many are kept."""

    #: Whether the worker records events (``Worker.track``); no events are read otherwise.
    tracked: bool
    #: The newest :data:`EVENTS_SHOWN` events, newest first.
    events: list[JobEvent]
    #: How many events of the id its shard's stream keeps.
    kept: int
    #: About how many entries each shard's stream keeps (``Worker.track_length``).
    track_length: int

    @property
    def capped(self) -> bool:
        """Whether older kept events are left out."""
        return self.kept > len(self.events)


def timeline(worker: type[lowkiq.Worker], job_id: str) -> Timeline:
    """The newest :data:`EVENTS_SHOWN` events of ``job_id``, newest first (none read for
    an untracked worker)."""
    if not worker.track:
        return Timeline(False, [], 0, worker.track_length)
    kept = worker.history(job_id)
    shown = fold_group_waits(kept)
    return Timeline(True, shown[::-1][:EVENTS_SHOWN], len(kept), worker.track_length)


def fold_group_waits(events: Sequence[JobEvent]) -> list[JobEvent]:
    """``events`` (oldest first) with each run of batches its group had no place for
    folded into one row: a pop undone at once by a ``restored`` event of reason
    ``group_full`` is left out, and a run of them is its last ``restored`` event with
    ``times`` (how many), so a job that waited for its group reads as one line."""
    folded: list[JobEvent] = []
    for event in events:
        if event.event == "restored" and event.details.get("reason") == GROUP_FULL:
            if folded and folded[-1].event == "popped":
                folded.pop()  # the pop this refusal undid
            if folded and _group_wait(folded[-1]):
                times = int(folded[-1].details.get("times", "1")) + 1
                folded[-1] = replace(event, details={**event.details, "times": str(times)})
                continue
        folded.append(event)
    return folded


def _group_wait(event: JobEvent) -> bool:
    return event.event == "restored" and event.details.get("reason") == GROUP_FULL


def worker_of_queue(queue: str) -> str | None:
    """The name of the registered worker whose queue is ``queue`` (``moved``'s ``to``,
    ``enqueued``'s ``from``), for a link to the job's page there."""
    for worker in lowkiq.settings.workers:
        if worker.queue_name == queue:
            return worker.__name__
    return None


def _once_words(name: str) -> str:
    """An enqueue made once (``once``: a workflow's callback, a released held call)."""
    if name.startswith("wf:") and name.count(":") >= 3:
        workflow_id, _, kind = name[3:].rsplit(":", 2)
        return f"Enqueued by workflow {workflow_id} (its on_{kind} callback)"
    if name.startswith("held:"):
        return "Enqueued after= its workflows (held until then, or released)"
    return "Enqueued"


def event_words(event: JobEvent) -> str:
    """What happened, in plain words: ``"Failed"``, ``"Moved to the morgue"``, ..."""
    details = event.details
    origin = details.get("from", "")
    match event.event:
        case "enqueued" if details.get("once"):
            return _once_words(details["once"])
        case "enqueued" if origin == "morgue":
            return "Queued up from the morgue"
        case "enqueued" if origin == "schedule":
            return "Enqueued by its schedule"
        case "enqueued" if origin:
            return f"Moved here from {origin}"
        case "enqueued" if details.get("merged") == "1":
            return "Enqueued, merged into the queued job"
        case "deleted" if origin == "morgue":
            return "Deleted from the morgue"
        case "moved":
            return f"Moved to {details.get('to') or 'another queue'}"
        case "restored" if details.get("reason") in RESTORE_WORDS:
            why = RESTORE_WORDS[details["reason"]]
            times = details.get("times")
            again = f", {times} times" if times else ""
            return f"Back in the queue unrun{again}: {why}"
        case "yielded":
            left = details.get("left", "")
            payloads = "payload" if left == "1" else "payloads"
            return f"Gave {left or 'its'} {payloads} back (yield_rest)"
    return WORDS.get(event.event, event.event)


#: Each event in plain words (the default of :func:`event_words`).
WORDS = {
    "enqueued": "Enqueued",
    "popped": "Taken into a batch",
    "done": "Done (its batch succeeded)",
    "failed": "Failed",
    "discarded": "Discarded (lowkiq.Discard)",
    "snoozed": "Snoozed (lowkiq.Snooze): due again later, not failed",
    "buried": "Moved to the morgue",
    "restored": "Back in the queue (its process died or stopped running it)",
    "deleted": "Deleted from the queue",
    "cancelled": "Cancelled while its batch ran (Worker.actions().cancel): not failed",
}

#: Why a batch went back into the queue unrun, by a ``restored`` event's ``reason``.
RESTORE_WORDS = {
    GROUP_FULL: "its group had no free place or token",
    "given_up": "its shard was handed over, or its process stopped, before it ran",
    "suspect_waits": "it waits to run alone after another suspect batch",
    "redis_error": "a Redis error left its batch's state unknown",
}

#: How an event's marker looks: ``ok`` (green), ``bad`` (red) or plain.
TONES = {"done": "ok", "failed": "bad", "buried": "bad", "discarded": "bad", "deleted": "bad"}


def retry_number(event: JobEvent) -> int | None:
    """A ``failed`` event's retry_count (its retry is retry ``n + 1``), or ``None``."""
    text = event.details.get("retry_count", "")
    try:
        return int(text)
    except ValueError:
        return None


def due_time(event: JobEvent) -> float | None:
    """When the event made the job due (``perform_in``: an enqueue's, a failure's retry),
    Unix seconds; ``None`` when it has none, or when an enqueue made it due at once."""
    try:
        due = float(event.details["perform_in"])
    except (KeyError, ValueError):
        return None
    if event.event == "enqueued" and due <= event.at + 1:
        return None
    return due


def other_details(event: JobEvent) -> dict[str, str]:
    """The event's details not shown in their own way (fields a later version may add),
    without empty ones."""
    return {k: v for k, v in event.details.items() if k not in SHOWN_DETAILS and v != ""}


@dataclass(frozen=True)
class DeadJobFacts:
    """What the dashboard can tell of a dead job beyond the morgue's ``updated_at``."""

    #: Its retries before it died: the ``failed`` events kept since it was last enqueued
    #: (each one scheduled a retry); ``None`` when the worker keeps no events.
    retries: int | None
    #: When it was first enqueued, Unix seconds, when known.
    first_enqueued: float | None
    #: Where :attr:`first_enqueued` comes from: ``event`` (the oldest ``enqueued`` event
    #: kept) or ``score`` (its oldest payload's score, a time).
    first_enqueued_from: str | None


def dead_job_facts(
    timeline_: Timeline, oldest_score: float | None, score_time: Callable[[float], float | None]
) -> DeadJobFacts:
    """The retries and first enqueue of a dead job, from its ``timeline_`` (newest first)
    or, for its first enqueue, its ``oldest_score`` when ``score_time`` reads it as a time
    (the morgue keeps neither)."""
    retries: int | None = None
    first: float | None = None
    if timeline_.tracked:
        retries = 0
        for event in timeline_.events:  # newest first: back to the enqueue that led here
            if event.event == "failed":
                retries += 1
            elif event.event == "enqueued":
                break
        enqueues = [event.at for event in timeline_.events if event.event == "enqueued"]
        first = min(enqueues) if enqueues else None
    if first is not None:
        return DeadJobFacts(retries, first, "event")
    at = None if oldest_score is None else score_time(oldest_score)
    return DeadJobFacts(retries, at, None if at is None else "score")
