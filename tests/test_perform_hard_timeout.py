"""What ``perform_timeout`` and ``perform_hard_timeout`` stop, in real ``lowkiq worker``
processes (``tests/apps/hard_limited.py``).

The soft limit raises again past its deadline, so a retry loop that swallows every
``Exception`` ends.  A ``perform`` blocked where no exception can be raised (``time.sleep``,
a socket ``recv``, ``subprocess.run``) is stopped by the hard limit: its process stops
cleanly (its other batches finish), the supervisor starts a new one, and the stuck batch
fails under the retry rules with an error naming the hard limit (no restore, no death).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.apps.runner import WorkerProcess, eventually

#: The limits of tests/apps/hard_limited.py.
SOFT = 1.0
HARD = 3.0
#: How long each way of blocking runs when nothing stops it.
BLOCKS = {"sleep": 10.0, "recv": 10.0, "subprocess": 8.0, "retry": 12.0}


@pytest.fixture
def app(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., WorkerProcess]]:
    """``start(worker, *args)``: a ``lowkiq worker`` process on the app serving
    ``TEST_WORKER=worker``; each is killed after the test."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    started: list[WorkerProcess] = []

    def start(worker: str, *args: str) -> WorkerProcess:
        process = WorkerProcess(
            "-r",
            "tests/apps/hard_limited.py",
            *args,
            env={"REDIS_URL": redis_url, "TEST_WORKER": worker},
        )
        started.append(process)
        process.wait_started()
        return process

    yield start
    for process in started:
        if process.process.poll() is None:
            process.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):  # killed below
                process.wait(30)
        process.close()


def rows(client: redis.Redis, key: str) -> list[list[str]]:
    """The rows of a list the app records, split."""
    return [row.decode().split() for row in client.lrange(key, 0, -1)]


def ended(client: redis.Redis, job_id: str) -> list[str]:
    """The first end the app recorded of ``job_id``: ``[pid, seconds, exception]``."""
    found: list[list[str]] = eventually(
        lambda: rows(client, f"test:hard:ended:{job_id}"), timeout=30
    )
    return found[0]


def test_a_retry_loop_that_swallows_exceptions_is_interrupted_again_and_fails(
    redis_client: redis.Redis, app: Callable[..., WorkerProcess]
) -> None:
    from tests.apps.hard_limited import Blocker

    app("Soft", "--threads", "1")
    Blocker.perform_async([{"id": "loop", "payload": {"how": "retry"}}])
    _, seconds, exception = ended(redis_client, "loop")
    # It swallowed the first PerformTimeout; a later one ended it, long before its 12 s.
    assert exception == "PerformTimeout", (seconds, exception)
    assert float(seconds) < BLOCKS["retry"] / 2, seconds
    [job] = eventually(lambda: Blocker.queries().fetch(["loop"]))
    assert job["retry_count"] == 0, job
    assert job["error"].startswith("PerformTimeout: Blocker:"), job
    assert "ran past Blocker.perform_timeout (1s)" in job["error"], job


def released_shards(output: str) -> set[tuple[str, int]]:
    """The shards a process's log says it released (``released A:0-2 B:1,3``)."""
    shards = set()
    for line in output.splitlines():
        _, found, names = line.partition("lowkiq.dispatcher: released ")
        for name in names.split() if found else []:
            worker, _, numbers = name.partition(":")
            for run in numbers.split(","):
                first, _, last = run.partition("-")
                shards.update((worker, n) for n in range(int(first), int(last or first) + 1))
    return shards


def check_failed_by_the_hard_limit(job_id: str) -> None:
    """``job_id`` failed once (retry_count 0, queued for its retry) with an error naming
    the hard limit; it was never restored after it ran."""
    from tests.apps.hard_limited import HardBlocker

    [job] = eventually(lambda: HardBlocker.queries().fetch([job_id]), timeout=30)
    assert job["retry_count"] == 0, job
    limit = "HardBlocker.perform_hard_timeout (3s)"
    assert job["error"].startswith("PerformHardTimeout: HardBlocker:"), job
    assert f"perform of '{job_id}' ran past {limit}" in job["error"], job
    history = HardBlocker.history(job_id)
    events = [event.event for event in history]
    # Its one perform failed; a batch popped before a hand-over between the starting
    # processes may have gone back unrun first (reason given_up), never after it ran.
    assert events[0] == "enqueued" and events[-2:] == ["popped", "failed"], events
    unrun = [e.details.get("reason") for e in history if e.event == "restored"]
    assert set(unrun) <= {"given_up"}, unrun


def test_a_perform_asleep_past_the_hard_limit_stops_its_process_after_its_other_batches(
    redis_client: redis.Redis, app: Callable[..., WorkerProcess]
) -> None:
    from tests.apps.hard_limited import HardBlocker, Neighbour

    process = app("Hard", "--threads", "2")
    Neighbour.perform_async([{"id": "n", "payload": {"seconds": 6}}])
    eventually(lambda: rows(redis_client, "test:hard:started:n"))
    HardBlocker.perform_async([{"id": "s", "payload": {"how": "sleep"}}])
    [[_, started]] = eventually(lambda: rows(redis_client, "test:hard:started:s"))
    assert process.wait(30) != 0, process.output()
    exited = time.time()
    # Its sleep never returned: the process stopped before it would have.
    assert exited < float(started) + BLOCKS["sleep"], process.output()
    assert rows(redis_client, "test:hard:ended:s") == []
    output = process.output()
    assert "perform_hard_timeout" in output and "PerformHardTimeout" in output, output
    # The stuck shard's lease was kept while its thread ran (it lapses once the process
    # is gone): no other process could serve the shard meanwhile.
    released = released_shards(output)
    assert ("Neighbour", 0) in released, output
    assert ("HardBlocker", HardBlocker.queries().shard_of("s")) not in released, output
    # The neighbour's batch finished during the stop and was acked: it ran once.
    assert rows(redis_client, "test:hard:ended:n")[0][1:] == ["done", "-"]
    assert len(rows(redis_client, "test:hard:started:n")) == 1
    assert Neighbour.queries().fetch(["n"]) == []
    assert Neighbour.metrics()["busy"] == 0
    check_failed_by_the_hard_limit("s")


@pytest.mark.parametrize("how", ["recv", "subprocess"])
def test_a_perform_blocked_past_the_hard_limit_has_its_process_restarted(
    how: str, redis_client: redis.Redis, app: Callable[..., WorkerProcess]
) -> None:
    from tests.apps.hard_limited import HardBlocker

    process = app("Hard", "--processes", "2", "--threads", "1")
    job_id = f"b-{how}"
    HardBlocker.perform_async([{"id": job_id, "payload": {"how": how}}])
    [[pid, started]] = eventually(lambda: rows(redis_client, f"test:hard:started:{job_id}"))
    restarted = f"(pid {pid}) exited with 1"
    eventually(lambda: restarted in process.output(), timeout=30)
    assert time.time() < float(started) + BLOCKS[how], process.output()
    assert rows(redis_client, f"test:hard:ended:{job_id}") == []
    # The supervisor starts another process in its place.
    eventually(lambda: process.output().count("started worker process") == 3, timeout=30)
    assert process.process.poll() is None
    check_failed_by_the_hard_limit(job_id)
