"""A worker app whose performs block where ``perform_timeout`` cannot reach them, or fork.

``TEST_WORKER`` picks the workers served:

* ``Soft``: ``Blocker`` (``perform_timeout = 1``, no hard limit);
* ``Hard``: ``HardBlocker`` (``perform_timeout = 1``, ``perform_hard_timeout = 3``) and
  ``Neighbour`` (no limit), whose ``{"seconds": s}`` sleeps ``s`` seconds and ends;
* ``Forks``: ``Forker`` (no limit), whose performs fork.

A ``Blocker``'s payload ``{"how": ...}`` says where it blocks: ``"sleep"`` (``time.sleep(10)``),
``"recv"`` (a socket ``recv`` with a 10 s timeout), ``"subprocess"`` (``subprocess.run``
of ``sleep 8``) or ``"retry"`` (a retry loop that swallows every ``Exception`` for 12 s).
Only the first run of an id blocks.  Every perform records its start
(``test:hard:started:<id>``, ``pid time``) and its end (``test:hard:ended:<id>``,
``pid seconds exception``: how long it ran, and what ended it, ``-`` for nothing).

A ``Forker``'s payload ``{"how": ...}``: ``"os_fork"`` forks a child that sleeps, sends it
TERM and records how it ended (``test:fork:status``: ``signal N``, ``exit N`` or
``alive``), with the Redis connection id the child's ``lowkiq.settings.client()`` uses
and the parent's (``test:fork:client``: ``parent child``) and whether the child still
saw a batch (``test:fork:batch``); ``"mp_fork"`` does the same with a
``multiprocessing`` process of the fork start method and its ``terminate()``;
``"returns"`` forks a child that returns from ``perform`` (no ``os._exit``) and records
whether it ended on its own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import subprocess
import threading
import time
from typing import Any

import redis

import lowkiq
from lowkiq.perform.timeouts import REPEAT_EVERY

record = redis.Redis.from_url(os.environ["REDIS_URL"])

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 4.0
lowkiq.settings.heartbeat_interval = 1.0
lowkiq.settings.format_error = lambda exc: f"{type(exc).__name__}: {exc}"

#: Seconds a forked child is given to end after TERM.
CHILD_GRACE = 5.0


def _retry_loop(seconds: float) -> None:
    """Retries that swallow every ``Exception``: attempts of ``REPEAT_EVERY`` seconds of
    Python, each followed by a back-off half as long again, for ``seconds``.  The first
    attempt runs across the 1 s limit (a single raise lands in it and is swallowed), the
    back-off after it across the limit + ``REPEAT_EVERY``."""
    end = time.monotonic() + seconds
    time.sleep(1.0 - REPEAT_EVERY / 2)
    while time.monotonic() < end:
        try:
            attempt_end = time.monotonic() + REPEAT_EVERY
            while time.monotonic() < attempt_end:
                pass
            raise ConnectionError("the service is down")
        except Exception:  # noqa: BLE001, S110 - what the loop is about
            pass
        time.sleep(REPEAT_EVERY * 1.5)


def _block(how: str) -> None:
    if how == "sleep":
        time.sleep(10)
    elif how == "recv":
        mine, theirs = socket.socketpair()
        with mine, theirs:
            mine.settimeout(10)
            with contextlib.suppress(TimeoutError):
                mine.recv(1)
    elif how == "subprocess":
        subprocess.run(["sleep", "8"], check=False)
    elif how == "retry":
        _retry_loop(12)


class Blocker(lowkiq.Worker):
    """Blocks where the soft limit cannot interrupt it (its first run of an id)."""

    shards_count = 2
    perform_timeout = 1.0
    track = True

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 60.0  # the retry stays queued: the test reads it

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            first = record.incr(f"test:hard:runs:{job_id}") == 1
            record.rpush(f"test:hard:started:{job_id}", f"{os.getpid()} {time.time()}")
            since = time.monotonic()
            ended = "-"
            try:
                if first:
                    _block(payloads[-1]["how"])
            except BaseException as exc:
                ended = type(exc).__name__
                raise
            finally:
                seconds = time.monotonic() - since
                record.rpush(f"test:hard:ended:{job_id}", f"{os.getpid()} {seconds:.3f} {ended}")


class HardBlocker(Blocker):
    """The same, with a hard limit."""

    perform_hard_timeout = 3.0


class Neighbour(lowkiq.Worker):
    """A batch that runs a while and ends: it finishes while its process stops."""

    shards_count = 1

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            record.rpush(f"test:hard:started:{job_id}", f"{os.getpid()} {time.time()}")
            time.sleep(payloads[-1]["seconds"])
            record.rpush(f"test:hard:ended:{job_id}", f"{os.getpid()} done -")


def _outcome(pid: int, grace: float = CHILD_GRACE) -> str:
    """How child ``pid`` ended within ``grace`` seconds (reaped), or ``alive`` (killed)."""
    end = time.monotonic() + grace
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return f"signal {os.WTERMSIG(status)}"
            return f"exit {os.WEXITSTATUS(status)}"
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "alive"


def _sleeper(ready: Any) -> None:
    """A forked child: say what it sees, then sleep."""
    child_client = lowkiq.settings.client().client_id()
    record.rpush("test:fork:batch", str(lowkiq.current_batch() is not None))
    ready.put(child_client)
    time.sleep(30)


class _Pipe:
    """What an ``os.fork`` child tells its parent: one line through a pipe."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()

    def put(self, value: Any) -> None:
        os.write(self.write, f"{value}\n".encode())

    def get(self) -> str:
        return os.read(self.read, 100).decode().strip()


class Forker(lowkiq.Worker):
    """Performs that fork."""

    shards_count = 1

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        parent_client = lowkiq.settings.client().client_id()
        for payloads in payloads_by_id.values():
            how = payloads[-1]["how"]
            if how == "os_fork":
                pipe = _Pipe()
                pid = os.fork()
                if pid == 0:
                    try:
                        _sleeper(pipe)
                    finally:
                        os._exit(0)
                record.rpush("test:fork:client", f"{parent_client} {pipe.get()}")
                os.kill(pid, signal.SIGTERM)
                record.rpush("test:fork:status", _outcome(pid))
            elif how == "mp_fork":
                context = multiprocessing.get_context("fork")
                queue = context.SimpleQueue()
                process = context.Process(target=_sleeper, args=(queue,))
                process.start()
                record.rpush("test:fork:client", f"{parent_client} {queue.get()}")
                process.terminate()
                process.join(CHILD_GRACE)
                if process.exitcode is None:
                    process.kill()
                    process.join()
                    record.rpush("test:fork:status", "alive")
                else:
                    record.rpush("test:fork:status", f"signal {-process.exitcode}")
            elif how == "returns":
                pid = os.fork()
                if pid == 0:
                    return  # forgets os._exit: the child goes back into lowkiq's code
                record.rpush("test:fork:status", _outcome(pid))
        record.rpush("test:fork:threads", threading.get_ident())


WORKERS: dict[str, list[type[lowkiq.Worker]]] = {
    "Soft": [Blocker],
    "Hard": [HardBlocker, Neighbour],
    "Forks": [Forker],
}
lowkiq.settings.workers = WORKERS[os.environ.get("TEST_WORKER", "Soft")]
