"""List pages: their query parameters and cursor pagination over the engine's range queries.

Id order pages on the exclusive lex bound ``(last_id``.  Score orders
(perform_in, retry_count, updated_at) have ties — a ``perform_async`` call
gives a thousand jobs the same perform_in — so their cursor is the last score
shown and the last id shown (``after`` and ``after_id``): the engine's
``after_id`` ranges continue inside the tie in id order, at any depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from werkzeug.exceptions import BadRequest

from lowkiq import Job, Queries

#: Page sizes a list offers.
PER_PAGE = (25, 100, 500)

#: The orders of each list (the first is the default).
ORDERS = {
    "enqueued": ("perform_in", "id", "retry_count"),
    "dead": ("updated_at", "id"),
    "busy": ("id",),
}
#: Each list's default direction.
DEFAULT_DIRECTION = {"enqueued": "asc", "dead": "desc", "busy": "asc"}


class BadParameter(BadRequest):
    """A list parameter that cannot be used; shown as a 400 page with its message."""


@dataclass(frozen=True)
class ListQuery:
    """What a list page shows: order, direction, start value, page size and cursor."""

    by: str
    direction: str
    start: str = ""
    per: int = PER_PAGE[0]
    after: str | None = None
    after_id: str | None = None

    def params(self, **changes: Any) -> dict[str, Any]:
        """URL parameters of this query (with ``changes``), defaults left out."""
        query = replace(self, **changes)
        params: dict[str, Any] = {"by": query.by, "dir": query.direction}
        if query.start:
            params["from"] = query.start
        if query.per != PER_PAGE[0]:
            params["per"] = query.per
        if query.after is not None:
            params["after"] = query.after
            if query.by != "id":
                params["after_id"] = query.after_id
        return params


@dataclass(frozen=True)
class Page:
    """One page of jobs and the cursor of the next one (``None`` on the last page)."""

    jobs: list[Job]
    next_after: str | None = None
    next_after_id: str | None = None


def _number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadParameter(f"{name} must be a number, got {text!r}") from None
    if math.isnan(value):
        raise BadParameter(f"{name} must be a number, got {text!r}")
    return value


#: Orders whose values are times: their start may also be an ISO 8601 date and time.
TIME_ORDERS = ("perform_in", "updated_at")


def _time(text: str) -> float:
    """A unix timestamp, or an ISO 8601 date and time (UTC unless it names an offset)."""
    try:
        return _number("from", text)
    except BadParameter:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadParameter(
            f"from must be a number or a date and time like 2026-11-22 14:05:00, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def parse_query(kind: str, args: Mapping[str, str]) -> ListQuery:
    """The :class:`ListQuery` of a request's arguments; :class:`BadParameter` names a bad one."""
    orders = ORDERS[kind]
    by = args.get("by") or orders[0]
    if by not in orders:
        raise BadParameter(f"by must be one of {', '.join(orders)}, got {by!r}")
    direction = args.get("dir") or DEFAULT_DIRECTION[kind]
    if direction not in ("asc", "desc"):
        raise BadParameter(f"dir must be asc or desc, got {direction!r}")
    per_text = args.get("per") or str(PER_PAGE[0])
    if per_text not in {str(p) for p in PER_PAGE}:
        raise BadParameter(f"per must be one of {', '.join(map(str, PER_PAGE))}, got {per_text!r}")
    start = (args.get("from") or "").strip()
    if "\0" in start:
        raise BadParameter("from must not contain NUL")
    after = args.get("after")
    after_id = args.get("after_id")
    for name, value in (("after", after), ("after_id", after_id)):
        if value is not None and "\0" in value:
            raise BadParameter(f"{name} must not contain NUL")
    if by in TIME_ORDERS and start:
        start = repr(_time(start))
    elif by != "id" and start:
        _number("from", start)
    if by != "id" and after is not None:
        _number("after", after)
        if after_id is None:
            raise BadParameter("after_id is required with after when by is not id")
    return ListQuery(by, direction, start, int(per_text), after, after_id)


def _id_page(
    forward: Callable[[str, str, int], list[Job]],
    backward: Callable[[str, str, int], list[Job]],
    query: ListQuery,
) -> Page:
    limit = query.per + 1
    asc = query.direction == "asc"
    if query.after is not None:
        bound = f"({query.after}"
    elif query.start:
        bound = f"[{query.start}"
    else:
        bound = "-" if asc else "+"
    jobs = forward(bound, "+", limit) if asc else backward(bound, "-", limit)
    if len(jobs) <= query.per:
        return Page(jobs)
    return Page(jobs[: query.per], jobs[query.per - 1]["id"])


def _score_page(
    forward: Callable[..., list[Job]],
    backward: Callable[..., list[Job]],
    query: ListQuery,
) -> Page:
    limit = query.per + 1
    asc = query.direction == "asc"
    fetch = forward if asc else backward
    end = "+inf" if asc else "-inf"
    if query.after is None:
        jobs = fetch(query.start or ("-inf" if asc else "+inf"), end, limit)
    else:
        jobs = fetch(query.after, end, limit, after_id=query.after_id)
    if len(jobs) <= query.per:
        return Page(jobs)
    last = jobs[query.per - 1]
    return Page(jobs[: query.per], repr(_score(last, query.by)), last["id"])


def _score(job: Job, by: str) -> float:
    """The value a score-ordered list of ``by`` sorts ``job`` by."""
    if by == "perform_in":
        return job["perform_in"]
    if by == "retry_count":
        return float(job["retry_count"])
    return job["updated_at"]


def enqueued_page(queries: Queries, query: ListQuery) -> Page:
    """A page of queued jobs."""
    if query.by == "id":
        return _id_page(queries.range_by_id, queries.rev_range_by_id, query)
    if query.by == "perform_in":
        return _score_page(queries.range_by_perform_in, queries.rev_range_by_perform_in, query)
    return _score_page(queries.range_by_retry_count, queries.rev_range_by_retry_count, query)


def dead_page(queries: Queries, query: ListQuery) -> Page:
    """A page of dead jobs."""
    if query.by == "id":
        return _id_page(queries.morgue_range_by_id, queries.morgue_rev_range_by_id, query)
    return _score_page(
        queries.morgue_range_by_updated_at, queries.morgue_rev_range_by_updated_at, query
    )


def busy_page(queries: Queries, query: ListQuery) -> Page:
    """A page of the jobs in processing areas (a few per shard: sorted in memory)."""
    jobs = sorted(queries.processing_data(), key=lambda job: job["id"].encode())
    if query.direction == "desc":
        jobs.reverse()
    if query.after is not None:
        mark = query.after.encode()
        if query.direction == "asc":
            jobs = [job for job in jobs if job["id"].encode() > mark]
        else:
            jobs = [job for job in jobs if job["id"].encode() < mark]
    elif query.start:
        mark = query.start.encode()
        if query.direction == "asc":
            jobs = [job for job in jobs if job["id"].encode() >= mark]
        else:
            jobs = [job for job in jobs if job["id"].encode() <= mark]
    if len(jobs) <= query.per:
        return Page(jobs)
    return Page(jobs[: query.per], jobs[query.per - 1]["id"])
