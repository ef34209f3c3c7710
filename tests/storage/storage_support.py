"""Constants and helpers the storage tests share (imported as a module, unlike conftest)."""

from __future__ import annotations

#: A fixed clock for tests that pass ``now`` explicitly (2023-11-14T22:13:20Z).
NOW = 1_700_000_000.0


def retry_in(retry_count: int) -> float:
    """The deterministic delay of the test workers: 10 s, 20 s, 30 s, ..."""
    return 10.0 * (retry_count + 1)
