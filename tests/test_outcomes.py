"""``Discard``, ``Kill`` and ``BatchFailed`` judged into per-job fates, and the error text
stored with a failed job (class, message, a bounded traceback); no Redis."""

from __future__ import annotations

import pytest

import lowkiq
from lowkiq.outcomes import Fate, JobVerdict, judge
from lowkiq.serializers import (
    MAX_ERROR_MESSAGE,
    MAX_ERROR_TRACEBACK,
    TRACEBACK_HEADER,
    format_error,
    split_error,
)


def raised(exc: Exception) -> Exception:
    """``exc`` with a traceback, as ``perform`` raises it."""
    try:
        raise exc
    except Exception as caught:
        return caught


def test_the_outcomes_are_lowkiq_errors_exported_by_name():
    for cls in (lowkiq.Discard, lowkiq.Kill, lowkiq.BatchFailed):
        assert issubclass(cls, lowkiq.LowkiqError) and cls.__name__ in lowkiq.__all__
        assert cls.__doc__


def test_a_plain_exception_retries_the_whole_batch_with_one_text():
    verdict = judge(ValueError("bad"), ["a", "b"], str)
    assert verdict.jobs == {"a": JobVerdict(Fate.RETRY, "bad"), "b": JobVerdict(Fate.RETRY, "bad")}
    assert verdict.failed and verdict.unknown == []


def test_discard_and_kill_decide_the_whole_batch():
    discard = judge(lowkiq.Discard("stale"), ["a"], str)
    assert discard.jobs == {"a": JobVerdict(Fate.DISCARD)} and not discard.failed
    kill = judge(lowkiq.Kill("gone"), ["a"], str)
    assert kill.jobs == {"a": JobVerdict(Fate.KILL, "gone")} and kill.failed


def test_batch_failed_names_the_failed_ids_and_the_rest_are_done():
    failures = {"b": KeyError("x"), 3: lowkiq.Kill("k"), "zz": ValueError("?")}
    verdict = judge(lowkiq.BatchFailed(failures), ["a", "b", "3"], format_error)
    assert verdict.ids(Fate.DONE) == ["a"]
    assert verdict.ids(Fate.RETRY) == ["b"] and verdict.jobs["b"].error == "KeyError: 'x'"
    assert verdict.ids(Fate.KILL) == ["3"]  # an int key is taken as str(key)
    assert verdict.unknown == ["zz"]


def test_batch_failed_refuses_a_value_that_is_not_an_exception():
    with pytest.raises(TypeError, match="value for id 'a' must be an exception, not str"):
        lowkiq.BatchFailed({"a": "declined"})  # type: ignore[dict-item]


def test_batch_failed_message_names_some_ids():
    exc = lowkiq.BatchFailed({str(n): ValueError() for n in range(7)})
    assert str(exc) == "7 job(s) of the batch failed: '0', '1', '2', '3', '4' and 2 more"


def test_the_error_text_starts_with_class_and_message():
    assert format_error(KeyError("status")) == "KeyError: 'status'"
    assert format_error(ValueError()) == "ValueError"  # never empty
    text = format_error(raised(KeyError("status")))
    assert text.startswith("KeyError: 'status'\n\n" + TRACEBACK_HEADER)
    assert "in raised" in text and text.endswith("KeyError: 'status'\n")


def test_a_chained_exception_keeps_its_cause_in_the_traceback():
    try:
        try:
            {}["status"]
        except KeyError as exc:
            raise lowkiq.Kill("no status") from exc
    except lowkiq.Kill as kill:
        text = format_error(kill)
    summary, traceback = split_error(text).summary, split_error(text).traceback or ""
    assert summary == "lowkiq.Kill: no status"
    assert "KeyError: 'status'" in traceback and "direct cause" in traceback


def ping(depth: int) -> None:
    """Raise from ``depth`` frames down (ping and pong alternate: Python does not fold them)."""
    if depth == 0:
        raise RuntimeError("innermost")
    pong(depth - 1)


def pong(depth: int) -> None:
    """See :func:`ping`."""
    ping(depth)


def test_a_long_traceback_keeps_its_end_and_says_it_was_cut():
    try:
        ping(200)
    except RuntimeError as exc:
        text = format_error(exc)
    error = split_error(text)
    assert error.summary == "RuntimeError: innermost"
    traceback = error.traceback or ""
    assert len(traceback) < MAX_ERROR_TRACEBACK + 200
    assert traceback.startswith(TRACEBACK_HEADER + "  [… ")
    assert "characters of the outer frames cut" in traceback
    # The innermost frames, where it was raised, are kept; the outermost are cut.
    assert 'raise RuntimeError("innermost")' in traceback
    assert traceback.endswith("RuntimeError: innermost\n")
    assert "in test_a_long_traceback" not in traceback


def test_a_long_message_is_cut_at_its_end():
    text = format_error(ValueError("x" * 10_000))
    assert text.startswith("ValueError: xxx") and text.endswith("more characters cut]")
    assert len(text) < MAX_ERROR_MESSAGE + 50


@pytest.mark.parametrize(
    ("text", "summary", "has_traceback"),
    [
        ("'status'", "'status'", False),  # stored before: str(exc)
        ("", "", False),
        ("line one\nline two", "line one\nline two", False),
        (
            "Traceback (most recent call last):\n  File \"x\", line 1\nKeyError: 'a'\n",
            "KeyError: 'a'",
            True,
        ),  # an app's format_error = traceback.format_exc
        ("KeyError: 'a'\n\n" + TRACEBACK_HEADER + "  File ...\n", "KeyError: 'a'", True),
    ],
)
def test_split_error_reads_every_kind_of_stored_text(text, summary, has_traceback):
    error = split_error(text)
    assert error.summary == summary
    assert (error.traceback is not None) is has_traceback
