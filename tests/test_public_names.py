"""The public exceptions read as users import them: ``lowkiq.Kill``, not the module
that defines it, in a job's stored error, a traceback and a log line."""

from __future__ import annotations

import pickle

import pytest

import lowkiq
from lowkiq.serializers import error_summary, format_error

PUBLIC_ERRORS = [
    name
    for name in lowkiq.__all__
    if isinstance(getattr(lowkiq, name), type) and issubclass(getattr(lowkiq, name), BaseException)
]


def test_the_outcomes_and_errors_of_perform_are_all_public():
    assert {"Kill", "Discard", "BatchFailed", "PerformTimeout", "LeaseLost"} <= set(PUBLIC_ERRORS)


@pytest.mark.parametrize("name", ["Kill", "Discard", "PerformTimeout", "LeaseLost"])
def test_a_stored_error_names_the_public_class(name):
    try:
        raise getattr(lowkiq, name)("no such customer")
    except lowkiq.LowkiqError as exc:
        error = format_error(exc)

    assert error.splitlines()[0] == f"lowkiq.{name}: no such customer"
    assert error.rstrip().endswith(f"lowkiq.{name}: no such customer")


@pytest.mark.parametrize("name", PUBLIC_ERRORS)
def test_every_public_exception_reads_as_lowkiq_dot_its_name(name):
    assert getattr(lowkiq, name).__module__ == "lowkiq"


def test_a_public_exception_still_pickles_by_its_public_name():
    again = pickle.loads(pickle.dumps(lowkiq.Kill("gone")))

    assert type(again) is lowkiq.Kill and str(again) == "gone"
    assert error_summary(again) == "lowkiq.Kill: gone"
