"""Numbers, durations and times formatted for people; the exact value goes in a tooltip."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from lowkiq import Undecodable
from lowkiq.serializers import ErrorText, split_error

_UNITS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))


def human_number(value: float) -> str:
    """``1234`` → ``"1.2K"``, ``3_400_000`` → ``"3.4M"``; small numbers as they are."""
    for size, unit in _UNITS:
        if abs(value) >= size:
            scaled = value / size
            text = f"{scaled:.1f}" if abs(scaled) < 100 else f"{scaled:.0f}"
            return text.removesuffix(".0") + unit
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.1f}"
    return str(int(value))


def human_bytes(count: float) -> str:
    """``123_456_789`` → ``"117.7 MiB"``: binary units, one decimal."""
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def human_duration(seconds: float) -> str:
    """``192`` → ``"3m 12s"``: the two largest units, ``"0s"`` for nothing, ms below 1 s."""
    if not math.isfinite(seconds):
        return str(seconds)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if 0 < seconds < 1:
        return f"{sign}{seconds * 1000:.0f}ms"
    parts: list[str] = []
    rest = int(seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        if rest >= size or (unit == "s" and not parts):
            parts.append(f"{rest // size}{unit}")
            rest %= size
        if len(parts) == 2:
            break
    return sign + " ".join(parts)


def iso_time(timestamp: float) -> str:
    """A unix timestamp as UTC ISO 8601, to the second."""
    try:
        moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(timestamp)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def machine_time(timestamp: float) -> str:
    """A unix timestamp as a ``<time datetime>`` value, ``"2026-11-22T14:05:30Z"`` ("" when
    it is no date)."""
    try:
        moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return ""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def relative_time(timestamp: float, now: float | None = None) -> str:
    """``"in 3m 12s"`` or ``"3m 12s ago"``."""
    delta = timestamp - (time.time() if now is None else now)
    if delta >= 0:
        return f"in {human_duration(delta)}"
    return f"{human_duration(-delta)} ago"


def retry_label(retry_count: int) -> str:
    """A job's retry_count in words: ``"fresh"`` (-1, it never failed), else the retry it
    waits for or runs: ``"retry 1"`` after its first failure (retry_count 0), ``"retry 3"``
    for retry_count 2."""
    return "fresh" if retry_count < 0 else f"retry {retry_count + 1}"


def retry_title(retry_count: int) -> str:
    """What :func:`retry_label` means, with the raw value (SPEC §9's ``-1 [fresh]``,
    ``n [retry]``), for its tooltip."""
    if retry_count < 0:
        return f"never failed (retry_count {retry_count} [fresh])"
    times = "once" if retry_count == 0 else f"{retry_count + 1} times"
    return f"failed {times} (retry_count {retry_count} [retry])"


def undecodable(payload: Any) -> bool:
    """Whether a payload is one the app's ``load_payload`` could not read."""
    return isinstance(payload, Undecodable)


def pretty_payload(payload: Any) -> str:
    """A payload pretty-printed as JSON (any value ``json`` cannot show becomes its repr;
    an undecodable one says why, with its raw bytes)."""
    if isinstance(payload, Undecodable):
        return f"{payload.reason}\nraw bytes: {payload.raw!r}"
    try:
        return json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(payload)


#: Characters of a list row's one-line payloads (:func:`payloads_line`).
PAYLOADS_LINE = 120


def compact_payload(payload: Any) -> str:
    """A payload as compact JSON on one line (its repr when ``json`` cannot show it;
    ``⚠ undecodable`` when the app could not read it)."""
    if isinstance(payload, Undecodable):
        return "⚠ undecodable"
    try:
        return json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(payload)


def payloads_line(payloads: list[Any], limit: int = PAYLOADS_LINE) -> str:
    """A job's payloads (``[payload, score]`` pairs) as one line of compact JSON, joined
    by ``", "``, cut at ``limit`` characters with an ellipsis."""
    text = ", ".join(compact_payload(payload) for payload, _score in payloads)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_parts(text: str) -> ErrorText:
    """A job's stored error split for display: ``summary`` (``Class: message``, or the
    whole text of an error stored without a traceback) and ``traceback`` (or ``None``)."""
    return split_error(text)


def exact_number(value: float) -> str:
    """The exact value shown on hover, with thousands separators."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3f}"
    return f"{int(value):,}"


def latency(seconds: float | None) -> str:
    """A perform time or queue wait: ``"0.42 ms"``, ``"12.3 ms"``, ``"2m 5s"``; ``"–"`` for none."""
    if seconds is None:
        return "–"
    if seconds < 0.01:
        return f"{seconds * 1000:.2f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    return human_duration(seconds)


def rate(value: float) -> str:
    """A rate as the chart shows it: ``"0"``, ``"0.25"``, ``"12.5"``, ``"1,234"``."""
    if value == 0:
        return "0"
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{round(value):,}"


def clock_time(timestamp: float) -> str:
    """A unix timestamp's UTC time of day, ``"14:05:30"``."""
    try:
        return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(timestamp)


#: Payload scores between these (2001-09-09 and 2100-01-01, Unix seconds) are shown as
#: times: lowkiq's default score is the time the payload was enqueued.
SCORE_TIMES = (1_000_000_000.0, 4_102_444_800.0)


def score_time(score: float) -> float | None:
    """``score`` as a Unix time when it reads as one (see :data:`SCORE_TIMES`), else
    ``None`` (an app's own number, e.g. a version: shown as given)."""
    low, high = SCORE_TIMES
    return float(score) if low <= float(score) < high else None


_PERIOD_UNITS = ((86400, "day"), (3600, "h"), (60, "min"), (1, "s"))


def period(every: timedelta) -> str:
    """A schedule's period in words: ``30 s``, ``5 min``, ``1 h 30 min``, ``2 days``,
    ``1.5 s`` (whole milliseconds)."""
    total_ms = round(every.total_seconds() * 1000)
    seconds, ms = divmod(total_ms, 1000)
    parts: list[str] = []
    for size, unit in _PERIOD_UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            plural = "s" if unit == "day" and count != 1 else ""
            parts.append(f"{count} {unit}{plural}")
    if ms:
        if parts and parts[-1].endswith(" s"):
            whole = int(parts.pop().split()[0])
            parts.append(f"{whole}.{ms:03d}".rstrip("0") + " s")
        else:
            parts.append(f"{ms} ms")
    return " ".join(parts) or "0 s"


#: What each ``catch_up`` does with the ticks missed while no worker process ran.
CATCH_UP_WORDS = {
    "last": "one job for them all",
    "none": "skipped, no job",
    "all": "one job each (the latest 100)",
}
