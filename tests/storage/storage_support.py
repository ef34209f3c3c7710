"""Constants and helpers the storage tests share (imported as a module, unlike conftest)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine

import lowkiq.worker as worker_module
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
        # Every thread's perform_async queues hold the scripts: forgotten.
        worker_module._producer_queues = worker_module._ProducerQueues()

    for name, value in constants.items():
        setattr(blob, name, value)
    reload()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(blob, name, value)
        reload()


def run_machine(
    machine: type[RuleBasedStateMachine],
    max_examples: int,
    steps: int = 40,
    shrink: bool = True,
) -> None:
    """Run a Hypothesis state machine of the storage tests: ``max_examples`` random runs
    of up to ``steps`` steps, no deadline, no example database (each run makes Redis
    round trips; a function-scoped Redis fixture is reused on purpose).  ``shrink=False``
    skips shrinking a failure (slow when an example makes hundreds of round trips)."""
    test = machine.TestCase
    test.settings = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        **({} if shrink else {"phases": [Phase.explicit, Phase.generate]}),
    )
    test().runTest()
