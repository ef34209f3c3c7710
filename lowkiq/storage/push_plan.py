"""How one ``perform_async`` call becomes push script calls: its jobs grouped by shard,
``perform_in``, group and form (below), cut into rounds, and laid out as each shard's
push arguments.  Plain functions of plain data; :mod:`lowkiq.storage.enqueueing` sends
them.

A job goes to the push script as its id and its *body*, which the section's form says
(``lua/push.lua``): ``n``, a single payload given no score: its length (``>I``) and the
payload, to which the script puts the id, NUL and now as the score (the member
``id\\0blob`` of :mod:`lowkiq.storage.blob`); ``s``, the member ``id\\0blob``, every
score given; ``m``, the member ``id\\0blob`` of several payloads, some of which may carry
:data:`~lowkiq.storage.blob.SCORE_NOW` for the script to fill in.  The script thus builds
no string for a job given with a score, and one (the member) for a job given none.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import Any

from lowkiq.storage import blob
from lowkiq.storage.layout import Layout

#: A validated job ready to push: id, serialized payload, score, perform_in, group; a
#: score or perform_in of ``None`` is "now" on Redis's clock, filled in by the push
#: script, and a perform_in ``"+seconds"`` is a delay added to Redis's clock there;
#: a group of ``None`` is the default group.
#: A plain tuple: enqueueing builds one per job, and a tuple is the cheapest.
NewJob = tuple[str, bytes, float | None, float | str | None, str | None]

#: A job as the push script gets it: its id and its body (the section's form says
#: what the body is: see the module).
Pushed = tuple[bytes, bytes]

#: The forms of a section's bodies (see the module).
UNSCORED, SCORED, TO_STAMP = "n", "s", "m"

#: A push section's key: perform_in (``None``, or ``''`` as the push script's arguments
#: say it, is "now"), group (``''``: none) and form.
Section = tuple[float | str | None, str, str]

#: Where a pushed job goes: shard, perform_in, group, form.
Place = tuple[int, float | str | None, str, str]

#: Pushed jobs by (shard, perform_in, group, form).
ByPlace = dict[Place, list[Pushed]]

#: At most so many jobs in one round (one round trip, a MULTI of push calls): the
#: push script costs about 5 µs a new job and 15-20 µs a job merged onto a queued
#: one, so a round keeps Redis busy some 5-20 ms.  (It also bounds the ARGV strings
#: of one script call, which Lua interns: many long payloads alike in the bytes its
#: string hash samples cost it time quadratic in their number.)
ROUND_JOBS = 1000
#: At most so many bytes of pushed jobs (id and body) in one round, at 2-4 ns a byte
#: in the push script.  A single larger job goes in a round of its own.
ROUND_BYTES = 4 * 1024 * 1024
#: The push script's arguments before its sections: now, and how perform_in merges.
HEAD = 2
#: The arguments of a section before its ids: perform_in, group, form, count.
SECTION_HEAD = 4

_LENGTH = struct.Struct(">I")


def sections(args: list[Any]) -> Iterator[tuple[Section, list[Pushed]]]:
    """The sections of one shard's push arguments (``now``, the merge of perform_in,
    then sections of perform_in, group, form, count, the ids, their bodies)."""
    i = HEAD
    while i < len(args):
        count = args[i + 3]
        ids = args[i + SECTION_HEAD : i + SECTION_HEAD + count]
        bodies = args[i + SECTION_HEAD + count : i + SECTION_HEAD + 2 * count]
        yield (args[i], args[i + 1], args[i + 2]), list(zip(ids, bodies, strict=True))
        i += SECTION_HEAD + 2 * count


def pushed_ids(by_shard: dict[int, list[Any]], shards: Iterable[int]) -> list[str]:
    """The job ids in the push arguments of ``shards``."""
    ids: list[str] = []
    for shard in shards:
        args = by_shard[shard]
        i = HEAD
        while i < len(args):
            count = args[i + 3]
            ids += [job_id.decode() for job_id in args[i + SECTION_HEAD : i + SECTION_HEAD + count]]
            i += SECTION_HEAD + 2 * count
    return ids


def placed_unique(jobs: list[NewJob], shards_count: int) -> ByPlace | None:
    """Pushed jobs by (shard, perform_in, group, form), or ``None`` when an id repeats.
    The common case of a call with distinct ids."""
    if len(set(map(itemgetter(0), jobs))) != len(jobs):
        return None
    by_shard: list[dict[Section, list[Pushed]] | None] = [None] * shards_count
    # by_shard's in use, first come first
    used: list[tuple[int, dict[Section, list[Pushed]]]] = []
    crc32 = zlib.crc32
    for job_id, payload, score, perform_in, group in jobs:
        id_bytes = job_id.encode()
        shard = crc32(id_bytes) % shards_count
        by_section = by_shard[shard]
        if by_section is None:
            by_section = by_shard[shard] = {}
            used.append((shard, by_section))
        form, body = _body(id_bytes, payload, score)
        section = (perform_in, group or "", form)
        pushed = by_section.get(section)
        if pushed is None:
            pushed = by_section[section] = []
        pushed.append((id_bytes, body))
    return {
        (shard, *section): pushed
        for shard, by_section in used
        for section, pushed in by_section.items()
    }


def _body(id_bytes: bytes, payload: bytes, score: float | None) -> tuple[str, bytes]:
    """The form and body of a job of distinct id (see the module)."""
    if score is None:
        return UNSCORED, _LENGTH.pack(len(payload)) + payload
    return SCORED, id_bytes + b"\0" + blob.pack_one(payload, score)


def one_push_args(
    job: NewJob, layout: Layout, now: float | str, merge_perform_in: str = "keep"
) -> dict[int, list[Any]]:
    """:func:`push_args` of a call of one job, which is one round of one section: the
    usual ``perform_async``, planned with no grouping."""
    job_id, payload, score, perform_in, group = job
    id_bytes = job_id.encode()
    form, body = _body(id_bytes, payload, score)
    args = [now, merge_perform_in, "" if perform_in is None else perform_in, group or "", form]
    return {layout.base + zlib.crc32(id_bytes) % layout.count: [*args, 1, id_bytes, body]}


def placed(jobs: list[NewJob], shards_count: int) -> ByPlace:
    """Pushed jobs by (shard, perform_in, group, form), the payloads of one id packed
    into one member (the id's first perform_in; its last group given, when any)."""
    by_id: dict[str, tuple[float | str | None, list[tuple[bytes, float | None]], str]] = {}
    for job_id, payload, score, perform_in, group in jobs:
        entry = by_id.get(job_id)
        if entry is None:
            by_id[job_id] = (perform_in, [(payload, score)], group or "")
        else:
            entry[1].append((payload, score))
            if group:
                by_id[job_id] = (entry[0], entry[1], group)
    by_place: ByPlace = {}
    for job_id, (perform_in, payloads, group) in by_id.items():
        id_bytes = job_id.encode()
        key = (zlib.crc32(id_bytes) % shards_count, perform_in, group, TO_STAMP)
        by_place.setdefault(key, []).append((id_bytes, id_bytes + b"\0" + blob.pack(payloads)))
    return by_place


def cut_rounds(by_place: ByPlace, max_jobs: int, max_bytes: int) -> list[ByPlace]:
    """``by_place`` cut into rounds of at most ``max_jobs`` jobs and ``max_bytes``
    bytes of jobs (ids and bodies; a job larger than that alone).  Each round takes its
    share of every place, so that on a Redis Cluster every master works in every round."""
    rounds: list[ByPlace] = []
    current: ByPlace = {}
    jobs = size = 0
    for key, pushed in _interleaved(by_place, max(1, max_jobs // max(1, len(by_place)))):
        start = 0
        while start < len(pushed):
            piece = pushed[start : start + max_jobs - jobs]
            take, taken_size = _fitting(piece, max_bytes - size)
            if take == 0 and not current:  # one job larger than a round
                take, taken_size = 1, _size(piece[0])
            if take:
                current.setdefault(key, []).extend(piece[:take])
                jobs, size, start = jobs + take, size + taken_size, start + take
            if take < len(piece) or jobs >= max_jobs:
                rounds.append(current)
                current, jobs, size = {}, 0, 0
    if current:
        rounds.append(current)
    return rounds


def _interleaved(by_place: ByPlace, step: int) -> Iterator[tuple[Place, list[Pushed]]]:
    """Slices of ``step`` jobs of each place in turn, each place's in order."""
    pending = list(by_place.items())
    offset = 0
    while pending:
        for key, pushed in pending:
            yield key, pushed[offset : offset + step]
        offset += step
        pending = [(key, pushed) for key, pushed in pending if len(pushed) > offset]


def _size(job: Pushed) -> int:
    """The bytes of a pushed job: its id and its body."""
    return len(job[0]) + len(job[1])


def _fitting(pushed: list[Pushed], room: int) -> tuple[int, int]:
    """How many of ``pushed``, from the first, fit in ``room`` bytes, and their size."""
    total = sum(map(_size, pushed))
    if total <= room:
        return len(pushed), total
    size = 0
    for count, job in enumerate(pushed):
        if size + _size(job) > room:
            return count, size
        size += _size(job)
    return len(pushed), size  # not reached: the jobs did not fit


def round_ids(rounds: Iterable[ByPlace]) -> list[str]:
    """The job ids of ``rounds``, in order."""
    return [
        job_id.decode()
        for by_place in rounds
        for pushed in by_place.values()
        for job_id, _ in pushed
    ]


def push_args(
    by_place: ByPlace, base: int, now: float | str, merge_perform_in: str = "keep"
) -> dict[int, list[Any]]:
    """The push script's arguments per shard (``base`` + the place's shard): ``now``,
    ``merge_perform_in`` (``keep``, ``latest`` or ``max``), then per section:
    perform_in (``''``: now), group (``''``: none), form, count, the ids, their bodies."""
    by_shard: dict[int, list[Any]] = {}
    for (shard, perform_in, group, form), pushed in by_place.items():
        args = by_shard.get(base + shard)
        if args is None:
            args = by_shard[base + shard] = [now, merge_perform_in]
        args += ("" if perform_in is None else perform_in, group, form, len(pushed))
        args += [job_id for job_id, _ in pushed]
        args += [body for _, body in pushed]
    return by_shard


def rerouted(refused: list[list[Any]], layout: Layout) -> dict[int, list[Any]]:
    """The push arguments of shards that refused them, regrouped by ``layout``'s shards."""
    by_place: ByPlace = {}
    for args in refused:
        for (perform_in, group, form), pushed in sections(args):
            for job in pushed:
                shard = zlib.crc32(job[0]) % layout.count
                by_place.setdefault((shard, perform_in, group, form), []).append(job)
    return push_args(by_place, layout.base, refused[0][0], refused[0][1])
