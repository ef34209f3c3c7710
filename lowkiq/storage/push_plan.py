"""How one ``perform_async`` call becomes push script calls: its jobs packed into
members ``id\\0blob`` (:mod:`lowkiq.storage.blob`), grouped by shard,
``perform_in`` and group, cut into rounds, and laid out as each shard's push arguments.
Plain functions of plain data; :mod:`lowkiq.storage.enqueueing` sends them."""

from __future__ import annotations

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

#: A push section's key: perform_in (``None``, or ``''`` as the push script's arguments
#: say it, is "now") and group (``''``: none).
Section = tuple[float | str | None, str]

#: Where a push member goes: shard, perform_in, group.
Place = tuple[int, float | str | None, str]

#: Push members ``id\0blob`` by (shard, perform_in, group).
ByPlace = dict[Place, list[bytes]]

#: At most so many jobs in one round (one round trip, a MULTI of push calls): the
#: push script costs about 5 µs a new job and 15-20 µs a job merged onto a queued
#: one, so a round keeps Redis busy some 5-20 ms.  (It also bounds the ARGV strings
#: of one script call, which Lua interns: many long payloads alike in the bytes its
#: string hash samples cost it time quadratic in their number.)
ROUND_JOBS = 1000
#: At most so many bytes of members (``id``, 13 bytes, payload) in one round, at
#: 2-4 ns a byte in the push script.  A single larger job goes in a round of its own.
ROUND_BYTES = 4 * 1024 * 1024
#: The push script's arguments before its sections: now, and how perform_in merges.
HEAD = 2


def sections(args: list[Any]) -> Iterator[tuple[Section, list[bytes]]]:
    """The sections of one shard's push arguments (``now``, the merge of perform_in,
    then sections of perform_in, group, count, members ``id\\0blob``)."""
    i = HEAD
    while i < len(args):
        count = args[i + 2]
        yield (args[i], args[i + 1]), args[i + 3 : i + 3 + count]
        i += 3 + count


def pushed_ids(by_shard: dict[int, list[Any]], shards: Iterable[int]) -> list[str]:
    """The job ids in the push arguments of ``shards``."""
    return [
        member.split(b"\0", 1)[0].decode()
        for shard in shards
        for _, members in sections(by_shard[shard])
        for member in members
    ]


def placed_unique(jobs: list[NewJob], shards_count: int) -> ByPlace | None:
    """Members ``id\\0blob`` by (shard, perform_in, group), or ``None`` when an id
    repeats.  The common case of a call with distinct ids."""
    if len(set(map(itemgetter(0), jobs))) != len(jobs):
        return None
    by_shard: list[dict[Section, list[bytes]] | None] = [None] * shards_count
    # by_shard's in use, first come first
    used: list[tuple[int, dict[Section, list[bytes]]]] = []
    crc32, pack_one = zlib.crc32, blob.pack_one
    for job_id, payload, score, perform_in, group in jobs:
        id_bytes = job_id.encode()
        shard = crc32(id_bytes) % shards_count
        by_section = by_shard[shard]
        if by_section is None:
            by_section = by_shard[shard] = {}
            used.append((shard, by_section))
        section = (perform_in, group or "")
        members = by_section.get(section)
        if members is None:
            members = by_section[section] = []
        members.append(id_bytes + b"\0" + pack_one(payload, score))
    return {
        (shard, *section): members
        for shard, by_section in used
        for section, members in by_section.items()
    }


def placed(jobs: list[NewJob], shards_count: int) -> ByPlace:
    """Members by (shard, perform_in, group), the payloads of one id packed into one
    member (the id's first perform_in; its last group given, when any)."""
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
        key = (zlib.crc32(id_bytes) % shards_count, perform_in, group)
        by_place.setdefault(key, []).append(id_bytes + b"\0" + blob.pack(payloads))
    return by_place


def cut_rounds(by_place: ByPlace, max_jobs: int, max_bytes: int) -> list[ByPlace]:
    """``by_place`` cut into rounds of at most ``max_jobs`` members and ``max_bytes``
    bytes of members (a member larger than that alone).  Each round takes its share
    of every place, so that on a Redis Cluster every master works in every round."""
    rounds: list[ByPlace] = []
    current: ByPlace = {}
    jobs = size = 0
    for key, members in _interleaved(by_place, max(1, max_jobs // max(1, len(by_place)))):
        start = 0
        while start < len(members):
            piece = members[start : start + max_jobs - jobs]
            take, taken_size = _fitting(piece, max_bytes - size)
            if take == 0 and not current:  # one member larger than a round
                take, taken_size = 1, len(piece[0])
            if take:
                current.setdefault(key, []).extend(piece[:take])
                jobs, size, start = jobs + take, size + taken_size, start + take
            if take < len(piece) or jobs >= max_jobs:
                rounds.append(current)
                current, jobs, size = {}, 0, 0
    if current:
        rounds.append(current)
    return rounds


def _interleaved(by_place: ByPlace, step: int) -> Iterator[tuple[Place, list[bytes]]]:
    """Slices of ``step`` members of each place in turn, each place's in order."""
    pending = list(by_place.items())
    offset = 0
    while pending:
        for key, members in pending:
            yield key, members[offset : offset + step]
        offset += step
        pending = [(key, members) for key, members in pending if len(members) > offset]


def _fitting(members: list[bytes], room: int) -> tuple[int, int]:
    """How many of ``members``, from the first, fit in ``room`` bytes, and their size."""
    total = sum(map(len, members))
    if total <= room:
        return len(members), total
    size = 0
    for count, member in enumerate(members):
        if size + len(member) > room:
            return count, size
        size += len(member)
    return len(members), size  # not reached: the members did not fit


def round_ids(rounds: Iterable[ByPlace]) -> list[str]:
    """The job ids of ``rounds``' members, in order."""
    return [
        member.split(b"\0", 1)[0].decode()
        for by_place in rounds
        for members in by_place.values()
        for member in members
    ]


def push_args(
    by_place: ByPlace, base: int, now: float | str, merge_perform_in: str = "keep"
) -> dict[int, list[Any]]:
    """The push script's arguments per shard (``base`` + the place's shard): ``now``,
    ``merge_perform_in`` (``keep``, ``latest`` or ``max``), then per section:
    perform_in (``''``: now), group (``''``: none), count, members."""
    by_shard: dict[int, list[Any]] = {}
    for (shard, perform_in, group), members in by_place.items():
        args = by_shard.get(base + shard)
        if args is None:
            args = by_shard[base + shard] = [now, merge_perform_in]
        args += ("" if perform_in is None else perform_in, group, len(members))
        args += members
    return by_shard


def rerouted(refused: list[list[Any]], layout: Layout) -> dict[int, list[Any]]:
    """The push arguments of shards that refused them, regrouped by ``layout``'s shards."""
    by_place: ByPlace = {}
    for args in refused:
        for (perform_in, group), members in sections(args):
            for member in members:
                shard = zlib.crc32(member.split(b"\0", 1)[0]) % layout.count
                by_place.setdefault((shard, perform_in, group), []).append(member)
    return push_args(by_place, layout.base, refused[0][0], refused[0][1])
