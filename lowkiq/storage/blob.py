"""The payloads of one job packed into one string (a *blob*).

A blob is repeated ``struct('>dI')`` (score, length) followed by the payload
bytes, ascending by score.  The Lua side (``lua/_common.lua``) reads and
writes the same format, so merging payloads never leaves Redis.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

_HEADER = struct.Struct(">dI")
_HEADER_SIZE = _HEADER.size
_LENGTH = struct.Struct(">I")

#: The score bytes of a payload enqueued without a score: a NaN (never a valid
#: score), which the push script (``lua/push.lua``) replaces with Redis's time, so
#: a producer's clock never orders payloads.  A stored blob never holds it.
SCORE_NOW = b"\x7f\xf8\x00\x00\x00\x00\x00\x00"

#: A job whose merged payloads number more than this, or whose blob passes
#: :data:`SPILL_BYTES`, moves them to a sorted set of its own (see
#: :mod:`lowkiq.storage.keys`): merging onto a blob costs O(payloads).
SPILL_PAYLOADS = 64
#: Blob size, in bytes, past which a job with several payloads moves them out.
SPILL_BYTES = 8192
#: At most this many payloads of hot ids go into one batch: ``perform`` gets
#: a hot id's smallest-score payloads and the rest stay queued, due, for the
#: next batch.  (A job kept packed holds at most :data:`SPILL_PAYLOADS`.)
BATCH_PAYLOADS = 250

#: The constants of this module the Lua scripts use (generated as ``local`` lines).
LUA_CONSTANTS = ("SPILL_PAYLOADS", "SPILL_BYTES", "BATCH_PAYLOADS")


def pack(payloads: Iterable[tuple[bytes, float | None]]) -> bytes:
    """Pack ``(payload, score)`` pairs; equal payloads keep the smallest score.

    A score of ``None`` is "now on Redis's clock": packed as :data:`SCORE_NOW`, first
    in the blob, for the push script to fill in (and merge with an equal payload's
    explicit score, which it may be smaller or larger than)."""
    best: dict[bytes, float] = {}
    now: dict[bytes, None] = {}  # payloads given without a score, in order
    for payload, score in payloads:
        if score is None:
            now[payload] = None
            continue
        known = best.get(payload)
        if known is None or score < known:
            best[payload] = score
    ordered = sorted(best.items(), key=lambda item: (item[1], item[0]))
    return b"".join(
        [SCORE_NOW + _LENGTH.pack(len(payload)) + payload for payload in now]
        + [_HEADER.pack(score, len(payload)) + payload for payload, score in ordered]
    )


def pack_one(payload: bytes, score: float | None) -> bytes:
    """Pack a single payload (the common case of ``perform_async``); ``None``: now."""
    if score is None:
        return SCORE_NOW + _LENGTH.pack(len(payload)) + payload
    return _HEADER.pack(score, len(payload)) + payload


def unpack(blob: bytes) -> list[tuple[bytes, float]]:
    """Unpack a blob into ``(payload, score)`` pairs, ascending by score."""
    size = len(blob)
    if size >= _HEADER_SIZE:  # mostly one payload: its header says it ends the blob
        score, length = _HEADER.unpack_from(blob)
        if length == size - _HEADER_SIZE:
            return [(blob[_HEADER_SIZE:], score)]
    pairs = []
    offset = 0
    while offset < size:
        score, length = _HEADER.unpack_from(blob, offset)
        offset += _HEADER_SIZE
        pairs.append((blob[offset : offset + length], score))
        offset += length
    return pairs


def split_member(member: bytes) -> tuple[str, bytes]:
    """Split a lex-zset member ``id\\0blob`` into the id and the blob.

    An empty blob marks a hot id: its payloads are in a sorted set of its own.
    """
    id_bytes, _, blob = member.partition(b"\0")
    return id_bytes.decode(), blob
