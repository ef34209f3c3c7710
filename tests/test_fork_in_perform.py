"""A child forked inside ``perform`` of a real ``lowkiq worker`` process is an ordinary
process (``tests/apps/hard_limited.py``, worker ``Forker``): TERM ends it, it makes its
own Redis connections, it is in no batch, and one that returns out of ``perform`` exits
instead of living on as a copy of the worker's thread."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
import redis

from tests.apps.runner import WorkerProcess, eventually


@pytest.fixture
def forker(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[type, WorkerProcess]]:
    """The ``Forker`` worker class, and a one-thread worker process serving it."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.hard_limited import Forker

    process = WorkerProcess(
        "-r",
        "tests/apps/hard_limited.py",
        "--threads",
        "1",
        env={"REDIS_URL": redis_url, "TEST_WORKER": "Forks"},
    )
    process.wait_started()
    yield Forker, process
    process.close()


def fork_once(client: redis.Redis, forker: type, how: str) -> str:
    """Perform one job forking ``how``; how its child ended (``signal N``, ``exit N``, or
    ``alive`` when it outlived the app's grace and was killed)."""
    forker.perform_async([{"id": how, "payload": {"how": how}}])
    [status] = eventually(lambda: client.lrange("test:fork:status", 0, -1), timeout=30)
    return str(status.decode())


@pytest.mark.parametrize("how", ["os_fork", "mp_fork"])
def test_a_child_forked_in_perform_ends_on_term_and_uses_its_own_connection(
    how: str, redis_client: redis.Redis, forker: tuple[type, WorkerProcess]
) -> None:
    worker, process = forker
    assert fork_once(redis_client, worker, how) == f"signal {int(signal.SIGTERM)}"
    [clients] = redis_client.lrange("test:fork:client", 0, -1)
    parent, child = clients.decode().split()
    assert parent != child  # the child never talks on the parent's socket
    assert redis_client.lrange("test:fork:batch", 0, -1) == [b"False"]
    # The worker process itself goes on: the job succeeded and the process stops on TERM.
    eventually(lambda: worker.metrics()["processed"] == 1)
    process.signal(signal.SIGTERM)
    assert process.wait(30) == 0, process.output()


def test_a_child_that_returns_out_of_perform_exits(
    redis_client: redis.Redis, forker: tuple[type, WorkerProcess]
) -> None:
    worker, process = forker
    assert fork_once(redis_client, worker, "returns") == "exit 0"
    eventually(lambda: worker.metrics()["processed"] == 1)
    # Only the parent finished the batch (the child did not hand it back a second time).
    assert len(redis_client.lrange("test:fork:threads", 0, -1)) == 1
    process.signal(signal.SIGTERM)
    assert process.wait(30) == 0, process.output()
