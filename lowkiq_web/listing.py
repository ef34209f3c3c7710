"""List pages: their query parameters and cursor pagination over the engine's range queries.

Id order pages on the exclusive lex bound ``(last_id``.  Score orders
(perform_in, retry_count, updated_at) have ties — a ``perform_async`` call
gives a thousand jobs the same perform_in — so their cursor is the last score
shown and the last id shown (``after`` and ``after_id``): the engine's
``after_id`` ranges continue inside the tie in id order, at any depth.

A search lists, by id, the jobs whose id contains a text (``prefix``): the ids
of the list are read with ``ZSCAN … MATCH *text*``, at most :data:`SEARCH_READS`
of them per page, so a search costs the same on any size of list.  The ids that
start with the text are also a lex range (``[text`` to ``[text`` + U+10FFFF),
read as a page is, so a search that stops early still lists every one of them
(on Scheduled, kept by time only, the bounded read is all there is).
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

#: The orders of each list (the first is the default).  Retries are jobs with
#: ``retry_count >= 0``; Scheduled, every queued job not yet due (retries waiting for
#: their time included), soonest first.
ORDERS = {
    "enqueued": ("perform_in", "id", "retry_count"),
    "retries": ("retry_count", "id"),
    "scheduled": ("perform_in",),
    "dead": ("updated_at", "id"),
    "busy": ("id",),
}
#: Each list's default direction.
DEFAULT_DIRECTION = {
    "enqueued": "asc",
    "retries": "asc",
    "scheduled": "asc",
    "dead": "desc",
    "busy": "asc",
}
#: The list titles.
TITLES = {
    "enqueued": "Enqueued",
    "retries": "Retries",
    "scheduled": "Scheduled",
    "dead": "Dead",
    "busy": "Busy",
}
#: Above every id that starts with a given prefix (the last code point).
PREFIX_END = "\U0010ffff"
#: The longest search text, characters.
SEARCH_MAX = 200
#: Ids one ``ZSCAN`` step of a search asks Redis to read in each shard (a hint; less
#: when the shards are many, to keep to :data:`SEARCH_READS`).
SEARCH_STEP = 1000
#: Ids a search reads at most, over all the shards of a list, for one page; past it
#: the page says the search stopped early.
SEARCH_READS = 200_000


class BadParameter(BadRequest):
    """A list parameter that cannot be used; shown as a 400 page with its message."""


@dataclass(frozen=True)
class ListQuery:
    """What a list page shows: order, direction, start value, page size, cursor and the
    text searched for in ids (``prefix``: a search lists by id)."""

    by: str
    direction: str
    start: str = ""
    per: int = PER_PAGE[0]
    after: str | None = None
    after_id: str | None = None
    prefix: str = ""

    def params(self, **changes: Any) -> dict[str, Any]:
        """URL parameters of this query (with ``changes``), defaults left out."""
        query = replace(self, **changes)
        params: dict[str, Any] = {"by": query.by, "dir": query.direction}
        if query.start:
            params["from"] = query.start
        if query.per != PER_PAGE[0]:
            params["per"] = query.per
        if query.prefix:
            params["prefix"] = query.prefix
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
    #: ``False`` when a search stopped after :data:`SEARCH_READS` ids: some ids that
    #: contain the text further in than at their start may be missing.
    searched_all: bool = True


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
    prefix = (args.get("prefix") or "").strip()
    if "\0" in prefix or PREFIX_END in prefix:
        raise BadParameter("prefix (the id search) must not contain NUL or U+10FFFF")
    if len(prefix) > SEARCH_MAX:
        raise BadParameter(
            f"prefix (the id search) must be at most {SEARCH_MAX} characters, got {len(prefix)}"
        )
    by = "id" if prefix else (args.get("by") or orders[0])
    if by not in orders and not prefix:
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
    return ListQuery(by, direction, start, int(per_text), after, after_id, prefix)


#: ``range_by_id``-like reads: jobs with ids between two lex bounds, at most a limit.
IdRange = Callable[[str, str, int], list[Job]]


def _id_page(forward: IdRange, backward: IdRange, query: ListQuery) -> Page:
    """A page in id order, from the query's start or cursor."""
    jobs = _id_jobs(forward, backward, query)
    if len(jobs) <= query.per:
        return Page(jobs)
    return Page(jobs[: query.per], jobs[query.per - 1]["id"])


def _id_jobs(forward: IdRange, backward: IdRange, query: ListQuery) -> list[Job]:
    """The page's jobs and the next one (``per + 1`` at most), in id order from the query's
    start or cursor; only ids starting with the searched text when there is one."""
    limit = query.per + 1
    asc = query.direction == "asc"
    low, high = ("-", "+")
    if query.prefix:
        low, high = f"[{query.prefix}", f"[{query.prefix}{PREFIX_END}"
    if query.after is not None:
        bound = f"({query.after}"
    elif query.start and (not query.prefix or _inside(query.start, query.prefix, asc)):
        bound = f"[{query.start}"
    else:
        bound = low if asc else high
    return forward(bound, high, limit) if asc else backward(bound, low, limit)


def _inside(start: str, prefix: str, asc: bool) -> bool:
    """Whether a page from ``start`` begins inside the ids starting with ``prefix`` (else
    it begins at the prefix's first id, ascending, or its last, descending)."""
    if asc:
        return start.encode() > prefix.encode()
    return start.encode() < (prefix + PREFIX_END).encode()


def _score_page(
    forward: Callable[..., list[Job]],
    backward: Callable[..., list[Job]],
    query: ListQuery,
    low: str = "-inf",
    high: str = "+inf",
) -> Page:
    """A page of a score order over ``[low, high]`` (Redis score bounds); a start outside
    it starts at its edge."""
    limit = query.per + 1
    asc = query.direction == "asc"
    fetch = forward if asc else backward
    end = high if asc else low
    if query.after is None:
        start = query.start or (low if asc else high)
        if asc and query.start and _below(float(query.start), low):
            start = low
        jobs = fetch(start, end, limit)
    else:
        jobs = fetch(query.after, end, limit, after_id=query.after_id)
    if len(jobs) <= query.per:
        return Page(jobs)
    last = jobs[query.per - 1]
    return Page(jobs[: query.per], repr(_score(last, query.by)), last["id"])


def _below(value: float, bound: str) -> bool:
    """Whether ``value`` is below the Redis score bound ``bound`` (as a minimum)."""
    if bound == "-inf":
        return False
    exclusive = bound.startswith("(")
    edge = float(bound.lstrip("("))
    return value < edge or (exclusive and value == edge)


def _score(job: Job, by: str) -> float:
    """The value a score-ordered list of ``by`` sorts ``job`` by."""
    if by == "perform_in":
        return job["perform_in"]
    if by == "retry_count":
        return float(job["retry_count"])
    return job["updated_at"]


def _scan_ids(
    queries: Queries, key: Callable[[int], str], text: str
) -> tuple[dict[str, float], bool]:
    """The ids containing ``text`` in the sorted sets ``key(shard)`` of every shard, with
    their scores, and whether every shard was read to its end: ``ZSCAN … MATCH`` in rounds
    of one pipelined step per shard, until about :data:`SEARCH_READS` ids are read."""
    pattern = "*" + "".join("\\" + c if c in "*?[]\\" else c for c in text) + "*"
    cursors = {shard: 0 for shard in queries.queue.shards}
    found: dict[str, float] = {}
    reads = 0
    while cursors and reads < SEARCH_READS:
        shards = list(cursors)
        step = max(1, min(SEARCH_STEP, (SEARCH_READS - reads) // len(shards)))
        pipe = queries.client.pipeline(transaction=False)
        for shard in shards:
            pipe.zscan(key(shard), cursors[shard], match=pattern, count=step)
        for shard, (cursor, pairs) in zip(shards, pipe.execute(), strict=True):
            found.update((member.decode(), score) for member, score in pairs)
            if int(cursor) == 0:
                del cursors[shard]
            else:
                cursors[shard] = cursor
        reads += step * len(shards)
    return found, not cursors


def _on_page(job_id: str, query: ListQuery) -> bool:
    """Whether ``job_id`` comes after the query's cursor, or at or after its start, in its
    direction (ids in byte order)."""
    key, asc = job_id.encode(), query.direction == "asc"
    if query.after is not None:
        mark = query.after.encode()
        return key > mark if asc else key < mark
    if query.start:
        mark = query.start.encode()
        return key >= mark if asc else key <= mark
    return True


def _search_page(
    queries: Queries,
    query: ListQuery,
    key: Callable[[int], str],
    fetch: Callable[[list[str]], list[Job]],
    by_id: tuple[IdRange, IdRange] | None = None,
    after_score: float | None = None,
) -> Page:
    """A page of the jobs whose id contains the searched text, by id: the ids of the sorted
    sets ``key(shard)`` (only those scored above ``after_score`` when given) read by
    :func:`_scan_ids`, then ``fetch``-ed; when the read stopped early, with the ids that
    start with the text from the lex range ``by_id`` (forward, backward)."""
    scores, searched_all = _scan_ids(queries, key, query.prefix)
    ids = {
        job_id
        for job_id, score in scores.items()
        if (after_score is None or score > after_score) and _on_page(job_id, query)
    }
    known: dict[str, Job] = {}
    if by_id is not None and not searched_all:
        known = {job["id"]: job for job in _id_jobs(*by_id, query)}
    ordered = sorted(ids | known.keys(), key=str.encode, reverse=query.direction == "desc")
    shown = ordered[: query.per]
    known.update((job["id"], job) for job in fetch([i for i in shown if i not in known]))
    jobs = [known[job_id] for job_id in shown if job_id in known]  # gone since: skipped
    next_after = shown[-1] if len(ordered) > query.per else None
    return Page(jobs, next_after, searched_all=searched_all)


def enqueued_page(queries: Queries, query: ListQuery) -> Page:
    """A page of queued jobs."""
    if query.prefix:
        by_id = (queries.range_by_id, queries.rev_range_by_id)
        return _search_page(queries, query, queries.keys.perform_in_zset, queries.fetch, by_id)
    if query.by == "id":
        return _id_page(queries.range_by_id, queries.rev_range_by_id, query)
    if query.by == "perform_in":
        return _score_page(queries.range_by_perform_in, queries.rev_range_by_perform_in, query)
    return _score_page(queries.range_by_retry_count, queries.rev_range_by_retry_count, query)


def retries_page(queries: Queries, query: ListQuery) -> Page:
    """A page of the queued jobs with ``retry_count >= 0``."""
    by_id = (queries.retries_range_by_id, queries.retries_rev_range_by_id)
    if query.prefix:
        return _search_page(queries, query, queries.keys.retry_count_zset, queries.fetch, by_id)
    if query.by == "id":
        return _id_page(*by_id, query)
    return _score_page(
        queries.range_by_retry_count, queries.rev_range_by_retry_count, query, low="0"
    )


def scheduled_page(queries: Queries, query: ListQuery) -> Page:
    """A page of the queued jobs not yet due (``perform_in`` after now on Redis's clock)."""
    now = queries.redis_time()
    if query.prefix:
        key = queries.keys.perform_in_zset
        return _search_page(queries, query, key, queries.fetch, after_score=now)
    low = f"({now!r}"
    return _score_page(queries.range_by_perform_in, queries.rev_range_by_perform_in, query, low)


def dead_page(queries: Queries, query: ListQuery) -> Page:
    """A page of dead jobs."""
    by_id = (queries.morgue_range_by_id, queries.morgue_rev_range_by_id)
    if query.prefix:
        key = queries.keys.morgue_updated_at_zset
        return _search_page(queries, query, key, queries.morgue_fetch, by_id)
    if query.by == "id":
        return _id_page(*by_id, query)
    return _score_page(
        queries.morgue_range_by_updated_at, queries.morgue_rev_range_by_updated_at, query
    )


def busy_page(queries: Queries, query: ListQuery) -> Page:
    """A page of the jobs in processing areas (a few per shard: sorted in memory)."""
    jobs = sorted(queries.processing_data(), key=lambda job: job["id"].encode())
    if query.direction == "desc":
        jobs.reverse()
    jobs = [job for job in jobs if query.prefix in job["id"] and _on_page(job["id"], query)]
    if len(jobs) <= query.per:
        return Page(jobs)
    return Page(jobs[: query.per], jobs[query.per - 1]["id"])
