"""How a payload enqueued inside a workflow is stored: tagged with the workflow's id.

A member's stored bytes are :data:`MARK`, ``>H`` the tag's length, the tag (the
workflow's id, NUL, its instance: a nonce made when it opened, so that a reused id never
counts what an earlier workflow of that id enqueued), then the payload as the codec
made it.  Payloads of one id still merge (SPEC §3): two
equal payloads of one workflow are one stored payload, so one member; equal payloads of
two workflows, or of a workflow and none, are two stored payloads, which ``perform``
gets once (:func:`untagged`).  The Lua scripts read the same tag (``wf_note`` in
``lua/_common.lua``) to tell the workflow when a member ends.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

#: The first bytes of a tagged payload (no JSON, pickle or msgpack value of one object
#: starts so).
MARK = b"\xff\xfelkw"
_LENGTH = struct.Struct(">H")
#: The longest workflow id (bytes of UTF-8).
MAX_ID_BYTES = 0xFFFF


def tag(workflow_id: str, instance: str, payload: bytes) -> bytes:
    """``payload`` stored as a member of instance ``instance`` of ``workflow_id``."""
    name = f"{workflow_id}\0{instance}".encode()
    return MARK + _LENGTH.pack(len(name)) + name + payload


def split(stored: bytes) -> tuple[str | None, bytes]:
    """``(workflow id, payload)`` of stored bytes; ``None`` for a payload of no workflow."""
    if not stored.startswith(MARK):
        return None, stored
    (length,) = _LENGTH.unpack_from(stored, len(MARK))
    start = len(MARK) + _LENGTH.size
    name = stored[start : start + length].decode()
    return name.split("\0", 1)[0], stored[start + length :]


def tag_of(stored: bytes) -> tuple[str, str]:
    """``(workflow id, instance)`` of a tagged payload."""
    (length,) = _LENGTH.unpack_from(stored, len(MARK))
    start = len(MARK) + _LENGTH.size
    workflow_id, _, instance = stored[start : start + length].decode().partition("\0")
    return workflow_id, instance


def member(queue: str, job_id: str, stored: bytes) -> str:
    """A member's name in its workflow: ``queue \\0 id \\0 digest``, the digest the first
    16 hex digits of the SHA-1 of the stored bytes, as the scripts write it."""
    return f"{queue}\0{job_id}\0{hashlib.sha1(stored).hexdigest()[:16]}"


def untagged(pairs: Iterable[tuple[bytes, float]]) -> tuple[list[tuple[bytes, float]], list[str]]:
    """Stored ``(payload, score)`` pairs (ascending by score) as the codec wrote them: tags
    taken off, an equal payload kept once (its smallest score); also the workflows of the
    tagged ones, in order."""
    result: list[tuple[bytes, float]] = []
    workflows: list[str] = []
    seen: set[bytes] | None = None
    for stored, score in pairs:
        if not stored.startswith(MARK):
            if seen is not None:
                if stored in seen:
                    continue
                seen.add(stored)
            result.append((stored, score))
            continue
        if seen is None:
            seen = {payload for payload, _ in result}
        workflow_id, payload = split(stored)
        if workflow_id is not None and workflow_id not in workflows:
            workflows.append(workflow_id)
        if payload not in seen:
            seen.add(payload)
            result.append((payload, score))
    return result, workflows


def origins(pairs: Iterable[tuple[bytes, float]]) -> list[list[int]]:
    """For each payload :func:`untagged` keeps, the positions (0-based) of the stored
    pairs behind it (one, or several equal payloads in and out of workflows)."""
    index: dict[bytes, int] = {}
    result: list[list[int]] = []
    for position, (stored, _) in enumerate(pairs):
        payload = split(stored)[1]
        at = index.setdefault(payload, len(result))
        if at == len(result):
            result.append([])
        result[at].append(position)
    return result
