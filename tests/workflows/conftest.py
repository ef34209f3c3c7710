"""Fixtures of the workflow tests: the recording workers start empty."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.workflows.workflow_support import reset


@pytest.fixture(autouse=True)
def fresh_workers() -> Iterator[None]:
    """The workers of :mod:`tests.workflows.workflow_support` record nothing yet."""
    reset()
    yield
    reset()
