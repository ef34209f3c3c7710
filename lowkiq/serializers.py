"""Payload and error serializers, bundled so storage code never reads global settings."""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


# The C encoder behind JSONEncoder, built once: json.dumps with options builds
# a new encoder per call, which costs more than the encoding of a small payload.
# markers=None skips the cycle check; a cycle then fails with RecursionError.
_C_ENCODER = (
    c_make_encoder(None, _not_serializable, encode_basestring, None, ":", ",", True, False, False)
    if c_make_encoder
    else None
)


def dump_json(payload: Any) -> bytes:
    """Canonical JSON: sorted keys and fixed separators, so equal values give equal bytes."""
    if _C_ENCODER is None:
        return _CANONICAL.encode(payload).encode()
    # A str too: the C encoder escapes it with the function JSONEncoder.encode uses.
    return "".join(_C_ENCODER(payload, 0)).encode()


_DECODER = json.JSONDecoder()
#: The decoder's scanner (what ``raw_decode`` calls, without its frame).
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]


def load_json(data: bytes) -> Any:
    """Inverse of :func:`dump_json` (UTF-8)."""
    text = data.decode()
    try:
        # dump_json writes no whitespace around the value: skip json's two regex scans.
        value, end = _SCAN(text, 0)
        if end == len(text):
            return value
    except (ValueError, StopIteration):  # (StopIteration: no value at all)
        pass
    return _DECODER.decode(text)  # raises json's own error for bad input


#: The most characters of a stored error's ``Class: message`` line(s); a longer message
#: keeps its start.
MAX_ERROR_MESSAGE = 2_000
#: The most characters of a stored error's traceback: a longer one keeps its end (the
#: innermost frames, where it was raised) and says how much was cut.
MAX_ERROR_TRACEBACK = 8_192
#: The line a Python traceback starts with; in a stored error it follows the summary
#: and a blank line.
TRACEBACK_HEADER = "Traceback (most recent call last):\n"


def format_error(exc: BaseException) -> str:
    """Default error text stored with a failed job: :func:`error_summary`, then a blank
    line and the traceback (chained exceptions included), at most
    :data:`MAX_ERROR_TRACEBACK` characters, its end kept.  An exception never raised
    (no traceback) gives the summary alone."""
    summary = error_summary(exc)
    full = "".join(traceback.format_exception(exc))
    last = "".join(traceback.format_exception_only(exc))
    frames = full[: -len(last)] if last and full.endswith(last) else full
    if not frames:
        return summary
    return summary + "\n\n" + _keep_end(frames + summary + "\n")


def error_summary(exc: BaseException) -> str:
    """``Class: message`` as Python prints it last in a traceback (``KeyError: 'status'``;
    the class alone when the message is empty; the module before the class unless it
    is a built-in), at most :data:`MAX_ERROR_MESSAGE` characters."""
    text = "".join(traceback.format_exception_only(exc)).strip()
    if len(text) <= MAX_ERROR_MESSAGE:
        return text
    return f"{text[:MAX_ERROR_MESSAGE]}… [{len(text) - MAX_ERROR_MESSAGE:,} more characters cut]"


def _keep_end(text: str) -> str:
    """``text`` if it is short enough, else its last whole lines, after a header and a
    line saying how much was cut."""
    if len(text) <= MAX_ERROR_TRACEBACK:
        return text
    tail = text[-MAX_ERROR_TRACEBACK:]
    tail = tail[tail.find("\n") + 1 :]
    cut = len(text) - len(tail)
    return (
        f"{TRACEBACK_HEADER}  [… {cut:,} characters of the outer frames cut; "
        f"the innermost {len(tail):,} kept …]\n{tail}"
    )


@dataclass(frozen=True)
class ErrorText:
    """A stored error text split for display: its summary (``Class: message``) and its
    traceback (``None``: the text has none, e.g. an error stored before tracebacks were
    kept, or a ``format_error`` of the app's own)."""

    summary: str
    traceback: str | None = None


def split_error(text: str) -> ErrorText:
    """Split an error text: :func:`format_error`'s (summary, blank line, traceback), a
    bare Python traceback (its last line is the summary) or any other text (all
    summary)."""
    at = text.find("\n\n" + TRACEBACK_HEADER)
    if at >= 0:
        return ErrorText(text[:at].strip(), text[at + 2 :])
    if text.startswith(TRACEBACK_HEADER):
        lines = [line for line in text.splitlines() if line.strip()]
        return ErrorText(lines[-1].strip(), text)
    return ErrorText(text)


def identity(value: Any) -> Any:
    """Return the value unchanged (the default ``dump_error``/``load_error``)."""
    return value


@dataclass(frozen=True)
class Undecodable:
    """A stored payload that ``load_payload`` could not read: its raw bytes and why.

    Reads for people (queries, the dashboard) show it in place of the payload
    instead of failing; a popped job with one goes to the morgue at once.
    """

    raw: bytes
    reason: str

    def __str__(self) -> str:
        return f"undecodable payload ({self.reason}), raw bytes: {self.raw!r}"


def decode_failure(what: str, exc: Exception) -> str:
    """Why ``what`` could not be decoded, in one line."""
    return f"{what} cannot be decoded: {type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Codec:
    """How payloads and error texts are turned into Redis bytes and back."""

    dump_payload: Callable[[Any], bytes | str] = dump_json
    load_payload: Callable[[bytes], Any] = load_json
    dump_error: Callable[[str], bytes | str] = identity
    load_error: Callable[[Any], str] = identity

    def error_bytes(self, text: str) -> bytes:
        """Serialize one error text to bytes."""
        data = self.dump_error(text)
        return data.encode() if isinstance(data, str) else bytes(data)

    def error_text(self, data: bytes) -> str:
        """Deserialize an error stored by :meth:`error_bytes`; one that ``load_error``
        cannot read comes back as a text that says so, with its raw bytes."""
        try:
            value = self.load_error(data)
        except Exception as exc:
            return f"[{decode_failure('this error', exc)}] raw bytes: {data!r}"
        return value.decode(errors="replace") if isinstance(value, bytes) else str(value)

    def payload_or_undecodable(self, data: bytes) -> Any:
        """The payload stored as ``data``, or :class:`Undecodable` when it cannot be read."""
        try:
            return self.load_payload(data)
        except Exception as exc:
            return Undecodable(data, decode_failure("the payload", exc))
