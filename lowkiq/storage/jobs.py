"""The job dicts ``perform_async`` takes, checked and normalized in this one place
before anything is written (SPEC §2): a bad job raises
:class:`~lowkiq.errors.InvalidJob` naming its index, field and value, and nothing of
the call is enqueued."""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lowkiq.errors import ConfigurationError, InvalidJob
from lowkiq.outcomes import MAX_DELAY
from lowkiq.storage.enqueueing import MIN_BULK_LEN
from lowkiq.storage.push_plan import NewJob

#: The fields of a job dict.
JOB_FIELDS = ("id", "payload", "score", "perform_in", "delay", "group")
_JOB_FIELDS = frozenset(JOB_FIELDS)

#: How an enqueue onto a queued id sets its perform_in (``Worker.merge_perform_in``):
#: ``keep`` the queued one (SPEC §3 rule 2), take the ``latest`` enqueue's (a
#: trailing-edge debounce), or the later of the two (``max``).
MERGE_PERFORM_IN = ("keep", "latest", "max")

#: 2001-01-01 00:00 UTC: the earliest ``perform_in`` taken (unix seconds).  Anything
#: earlier is a delay or a zero given for a timestamp.
EARLIEST_PERFORM_IN = 978_307_200.0
#: 2200-01-01 00:00 UTC: the latest ``perform_in`` taken (unix seconds).
LATEST_PERFORM_IN = 7_258_118_400.0
#: What starts a perform_in that is a delay on Redis's clock in a :data:`NewJob`.
DELAY_MARK = "+"
#: Bytes a push adds to a payload in Redis's argument besides the id: ``\0``, the
#: score and the length (see :mod:`lowkiq.storage.blob`).
MEMBER_OVERHEAD = 13

#: What ``object.__repr__`` (and so a default ``str``) ends with: an address, which
#: differs between processes and runs, so jobs of the "same" object never merge.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_ID_KINDS = "a str, an int or a value with a value-based str (UUID, Decimal, ...)"


def validate_jobs(
    jobs: Sequence[dict[str, Any]],
    dump: Callable[[Any], bytes | str],
    bulk_limit: Callable[[], int],
) -> list[NewJob]:
    """Check and normalize every job before anything is written.

    ``dump`` is the payload serializer (a ``str`` result is stored UTF-8 encoded);
    ``bulk_limit`` gives Redis's ``proto-max-bulk-len``, asked only for a payload
    too large to fit under any Redis's.  A missing ``score`` or ``perform_in`` comes
    back ``None``: now on Redis's clock, set by the push script.  A ``delay`` comes
    back as the perform_in ``"+seconds"``, added to Redis's clock by the push script.
    A ``group`` is kept as a string (``None``: the default group).
    """
    check_job_list(jobs)
    result: list[NewJob] = []
    groups: dict[str, str] = {}  # id -> the group a job of this call gave it
    for index, job in enumerate(jobs):
        if job.__class__ is not dict and not isinstance(job, dict):
            raise InvalidJob(index, "job", f"must be a dict, got {job!r}")
        if not _JOB_FIELDS.issuperset(job):
            key = next(key for key in job if key not in _JOB_FIELDS)
            raise InvalidJob(index, key, f"is not a job field (fields: {', '.join(JOB_FIELDS)})")
        job_id = job_id_of(index, job.get("id"))
        payload = _payload(index, job.get("payload", ""), dump)
        if len(payload) + 4 * len(job_id) + MEMBER_OVERHEAD > MIN_BULK_LEN:
            _check_size(index, job_id, payload, bulk_limit())
        score = _score(index, job["score"]) if "score" in job else None
        perform_in: float | str | None = None
        if "perform_in" in job:
            if "delay" in job:
                raise InvalidJob(
                    index,
                    "delay",
                    "cannot go with perform_in: give one (delay: seconds from now, on "
                    "Redis's clock; perform_in: a unix timestamp)",
                )
            perform_in = _perform_in(index, job["perform_in"])
        elif "delay" in job:
            perform_in = _delay(index, job["delay"])
        group = job.get("group")
        if group is not None:
            group = _group(index, group)
            if groups.setdefault(job_id, group) != group:
                raise InvalidJob(
                    index,
                    "group",
                    f"is {group!r}, but an earlier job of this call gave id {job_id!r} the "
                    f"group {groups[job_id]!r}: an id has one group while it is queued",
                )
        result.append((job_id, payload, score, perform_in, group))
    return result


def check_job_list(jobs: object) -> None:
    """Raise :class:`InvalidJob` (of no job: ``index`` ``None``) unless ``jobs`` is a
    list (a sequence) of jobs; a single job dict is refused with a hint to wrap it."""
    if jobs.__class__ is list:  # the usual call: no abstract class asked
        return
    if isinstance(jobs, dict):
        raise InvalidJob(
            None,
            "jobs",
            "must be a list of job dicts, got one dict: wrap it in a list, perform_async([{...}])",
        )
    if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Sequence):
        raise InvalidJob(None, "jobs", f"must be a list of job dicts, got {type(jobs).__name__}")


def job_id_of(index: int, value: Any) -> str:
    """A job's id as stored: ``str(value)`` of a str, an int (not a bool) or a value
    whose ``str`` is its value; raises :class:`InvalidJob` for anything else (bytes,
    an object whose ``str`` names its address), which would never merge."""
    return _key_text(index, "id", value)


def _group(index: int, value: Any) -> str:
    """A job's group as stored: a non-empty string, made as an id is."""
    group = _key_text(index, "group", value)
    if not group:
        raise InvalidJob(index, "group", "must not be empty (leave it out: the default group)")
    return group


def _key_text(index: int, field: str, value: Any) -> str:
    """An id or a group as stored (see :func:`job_id_of`)."""
    if value.__class__ is str:
        text: str = value
    elif value.__class__ is int:
        text = _str(index, field, value)
    else:
        text = _other_key(index, field, value)
    if "\0" in text:
        raise InvalidJob(index, field, "must not contain NUL characters")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise InvalidJob(index, field, "must be valid Unicode (no lone surrogates)") from None
    return text


def _other_key(index: int, field: str, value: Any) -> str:
    """The id or group of a value other than a plain str or int."""
    if value is None:
        raise InvalidJob(index, field, "is required")
    if isinstance(value, bool):
        raise InvalidJob(index, field, f"must be {_ID_KINDS}, got the bool {value!r}")
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidJob(
            index,
            field,
            f"must be {_ID_KINDS}, got {type(value).__name__} {bytes(value)[:40]!r}: "
            f"decode it first (e.g. value.decode())",
        )
    text = _str(index, field, value)
    if _ADDRESS.search(text):
        raise InvalidJob(
            index,
            field,
            f"must be {_ID_KINDS}; the str of this {type(value).__name__} is {text[:80]!r}, "
            f"which holds an address, not its value (give e.g. str(obj.pk), or define "
            f"__str__)",
        )
    return text


def _str(index: int, field: str, value: Any) -> str:
    try:
        return str(value)
    except Exception as exc:  # e.g. an int past Python's digit limit
        raise InvalidJob(index, field, f"cannot be made a string: {exc}") from None


def _payload(index: int, value: Any, dump: Callable[[Any], bytes | str]) -> bytes:
    """The serialized payload, as bytes."""
    try:
        payload = dump(value)
        if payload.__class__ is not bytes:
            payload = payload.encode() if isinstance(payload, str) else bytes(payload)
    except Exception as exc:
        raise InvalidJob(index, "payload", f"cannot be serialized: {exc}") from exc
    return payload


def _check_size(index: int, job_id: str, payload: bytes, limit: int) -> None:
    """Raise when the push argument of this job would pass Redis's ``limit``
    (``proto-max-bulk-len``): Redis would drop the connection on it."""
    size = len(payload) + len(job_id.encode()) + MEMBER_OVERHEAD
    if size > limit:
        raise InvalidJob(
            index,
            "payload",
            f"is {len(payload):,} bytes serialized: more than Redis accepts in one argument "
            f"(its proto-max-bulk-len is {limit:,} bytes, and the id and "
            f"{MEMBER_OVERHEAD} bytes go with the payload); store it elsewhere and "
            f"enqueue a reference, or raise proto-max-bulk-len",
        )


def _number(index: int, field: str, value: Any) -> float:
    """``value`` as a finite float."""
    if value.__class__ is not float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidJob(index, field, f"must be a number, got {value!r}")
        try:
            value = float(value)
        except OverflowError:
            raise InvalidJob(index, field, f"must be finite, got {value!r}") from None
    number: float = value
    if not math.isfinite(number):
        raise InvalidJob(index, field, f"must be finite, got {value!r}")
    return number


def _score(index: int, value: Any) -> float:
    """A given score: any finite number (a time, or a version number)."""
    return _number(index, "score", value)


def _perform_in(index: int, value: Any) -> float:
    """A given perform_in: a unix timestamp from 2001 to 2200 (a delay, a zero or a
    huge number would make the job's lag absurd), or a timezone-aware datetime."""
    if isinstance(value, datetime.datetime):
        if value.utcoffset() is None:
            raise InvalidJob(
                index,
                "perform_in",
                f"is a naive datetime ({value.isoformat()}), which names no moment: give "
                f"it a timezone (e.g. datetime.now(timezone.utc) + timedelta(minutes=5)) "
                f"or a unix timestamp",
            )
        value = value.timestamp()
    elif isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
        raise InvalidJob(
            index,
            "perform_in",
            f"must be a unix timestamp or a datetime, got a timedelta: for {seconds!r} "
            f'seconds from now give "delay": {seconds!r} (on Redis\'s clock)',
        )
    number = _number(index, "perform_in", value)
    if EARLIEST_PERFORM_IN <= number < LATEST_PERFORM_IN:
        return number
    hint = (
        f"for {value!r} seconds from now, give time.time() + {value!r} "
        f'(or "delay": {value!r}, on Redis\'s clock)'
        if 0 <= number < EARLIEST_PERFORM_IN
        else "e.g. time.time() + 60 for a minute from now"
    )
    raise InvalidJob(
        index,
        "perform_in",
        f"must be a unix timestamp between 2001-01-01 and 2200-01-01, got {value!r}: {hint}",
    )


def _delay(index: int, value: Any) -> str | None:
    """A given delay: seconds from now on Redis's clock, from 0 to :data:`MAX_DELAY`,
    as the perform_in ``"+seconds"`` (``None`` for 0: now)."""
    number = _number(index, "delay", value)
    if not 0 <= number <= MAX_DELAY:
        raise InvalidJob(
            index, "delay", f"must be seconds from now, from 0 to {MAX_DELAY:.0f}, got {value!r}"
        )
    return f"{DELAY_MARK}{number!r}" if number else None


def check_merge_perform_in(worker: str, value: object) -> None:
    """Raise :class:`~lowkiq.errors.ConfigurationError` unless ``value`` is one of
    :data:`MERGE_PERFORM_IN`."""
    if value not in MERGE_PERFORM_IN:
        raise ConfigurationError(
            f"{worker}.merge_perform_in must be one of {', '.join(map(repr, MERGE_PERFORM_IN))}, "
            f"got {value!r}"
        )


def check_group_weights(worker: str, weights: object) -> None:
    """Raise :class:`~lowkiq.errors.ConfigurationError` unless ``weights`` maps group
    names (non-empty strings) to finite numbers > 0."""
    if not isinstance(weights, Mapping):
        raise ConfigurationError(
            f"{worker}.group_weights must be a dict of group -> weight, got {weights!r}"
        )
    for group, weight in weights.items():
        if not isinstance(group, str) or not group or "\0" in group:
            raise ConfigurationError(
                f"{worker}.group_weights: a group must be a non-empty string, got {group!r}"
            )
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not 0 < weight < math.inf
        ):
            raise ConfigurationError(
                f"{worker}.group_weights[{group!r}] must be a number > 0, got {weight!r}"
            )
