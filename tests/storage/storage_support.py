"""Constants and helpers the storage tests share (imported as a module, unlike conftest)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from lowkiq.storage import blob, scripts

#: A fixed clock for tests that pass ``now`` explicitly (2023-11-14T22:13:20Z).
NOW = 1_700_000_000.0


def retry_in(retry_count: int) -> float:
    """The deterministic delay of the test workers: 10 s, 20 s, 30 s, ..."""
    return 10.0 * (retry_count + 1)


@contextlib.contextmanager
def hot_layout(**constants: int) -> Iterator[None]:
    """Run the Lua scripts with other :mod:`lowkiq.storage.blob` limits, e.g.
    ``SPILL_PAYLOADS=1`` so that every job with two payloads is a hot id."""
    saved = {name: getattr(blob, name) for name in constants}

    def reload() -> None:
        scripts.source.cache_clear()
        with scripts._LOCK:
            scripts._BY_CLIENT.clear()

    for name, value in constants.items():
        setattr(blob, name, value)
    reload()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(blob, name, value)
        reload()
