"""Faults as inputs: a dispatcher's Redis client that fails its N-th call, and a recorder
of every perform, for the runtime's invariants (``tests/runtime/test_faults.py``).

A :class:`FaultyClient` counts the calls the dispatcher makes (a write of several
commands is one call, as it is one trip to Redis) and fails the one a :class:`Fault`
names, in one of the ways Redis and the network fail:

* ``refused``: the connection fails before anything is sent: nothing ran;
* ``lost``: everything ran, the connection fails before the replies are read;
* ``timeout``: the same, as a read timeout;
* ``cut``: the first half of a write's commands ran, the connection fails there;
* ``oom``: Redis refuses the first command of the call at maxmemory (an error reply;
  it did not run), the others run;
* ``noscript``: Redis lost its scripts just before the call (a restart or ``SCRIPT
  FLUSH``): the client loads them again.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.exceptions import OutOfMemoryError

import lowkiq
from lowkiq.clients.cluster import ClusterThreadClient
from lowkiq.clients.connection import Client, KeyedCommand
from lowkiq.clients.thread import ThreadClient
from lowkiq.ownership.cancels import CANCELLED
from lowkiq.running import running as performing

KINDS = ("refused", "lost", "timeout", "cut", "oom", "noscript")


@dataclass
class Fault:
    """Fail call number ``at`` (1-based; 0: none) in the way ``kind`` says."""

    at: int = 0
    kind: str = "lost"
    #: Calls counted so far, and whether the fault fired.
    calls: int = 0
    fired: bool = False
    #: Calls are counted once armed (not while a test sets the dispatcher up).
    armed: bool = False
    #: Where the failed call was made (the stack), once it fired.
    where: str = ""
    #: Count only the calls of this script (its SHA; ``None``: every call).
    sha: str | None = None

    def strikes(self, shas: Sequence[str | None] = (None,)) -> bool:
        """Count a call (running the scripts ``shas``); ``True`` when it is the one to
        fail."""
        if not self.armed or (self.sha is not None and self.sha not in shas):
            return False
        self.calls += 1
        if self.calls == self.at:
            self.fired = True
            self.where = "".join(traceback.format_stack(limit=9)[:-3])
            return True
        return False


def _oom() -> OutOfMemoryError:
    return OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'.")


class Faulty(ThreadClient):
    """What a dispatcher's client does to fail the call its :class:`Fault` names (mixed
    into a server's and a cluster's thread client)."""

    fault: Fault
    _admin: Client

    def _error(self) -> redis.RedisError:
        if self.fault.kind == "timeout":
            return redis.TimeoutError("injected: timeout reading the reply")
        return redis.ConnectionError("injected: connection lost")

    def _before(self, shas: Sequence[str | None] = (None,)) -> str | None:
        """The kind of fault for this call (of the scripts ``shas``), after doing what must
        happen before it is sent (``refused`` raises, ``noscript`` flushes the scripts)."""
        if not self.fault.strikes(shas):
            return None
        kind = self.fault.kind
        if kind == "refused":
            self.disconnect()
            raise redis.ConnectionError("injected: connection refused")
        if kind == "noscript":
            if isinstance(self._admin, redis.RedisCluster):
                self._admin.execute_command(
                    "SCRIPT FLUSH", target_nodes=redis.RedisCluster.PRIMARIES
                )
            else:
                self._admin.script_flush()
            return None
        return kind

    def _after(self) -> None:
        self.disconnect()
        raise self._error()

    def run_keyed(self, commands: Sequence[KeyedCommand]) -> list[Any]:
        kind = self._before([script and script.sha for _, _, script in commands])
        if kind is None:
            return super().run_keyed(commands)
        if kind == "oom":
            return [_oom(), *super().run_keyed(commands[1:])] if commands else []
        if kind == "cut":
            super().run_keyed(commands[: len(commands) // 2])
        else:
            super().run_keyed(commands)
        self._after()
        raise AssertionError("unreachable")

    def _one(self, call: Any, sha: str | None = None) -> Any:
        kind = self._before((sha,))
        if kind is None:
            return call()
        if kind == "oom":
            raise _oom()
        call()  # lost, timeout, cut: a single command cut short ran (whole)
        self._after()
        raise AssertionError("unreachable")

    def run_command(self, command: KeyedCommand) -> Any:
        script = command[2]
        return self._one(lambda: super(Faulty, self).run_command(command), script and script.sha)

    def run_script(self, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return self._one(lambda: super(Faulty, self).run_script(script, keys, args), script.sha)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self._one(lambda: super(Faulty, self).execute_command(*args, **options))


class FaultyClient(Faulty):
    """A server's dispatcher client that fails the call its :class:`Fault` names."""

    def __init__(self, template: redis.Redis, fault: Fault) -> None:
        super().__init__(template)
        self.fault, self._admin = fault, template


class FaultyClusterClient(Faulty, ClusterThreadClient):
    """A cluster's dispatcher client that fails the call its :class:`Fault` names."""

    def __init__(self, template: redis.RedisCluster, fault: Fault) -> None:
        ClusterThreadClient.__init__(self, template)
        self.fault, self._admin = fault, template


def faulty(template: Client, fault: Fault) -> Faulty:
    """The dispatcher client of ``template``'s kind of Redis, failing as ``fault`` says."""
    if isinstance(template, redis.RedisCluster):
        return FaultyClusterClient(template, fault)
    return FaultyClient(template, fault)


@dataclass
class Performs:
    """Every perform's start and end, by shard, to check that no shard ever ran two
    batches at once and which payloads ran."""

    #: shard -> (start, end) of each perform.
    spans: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    #: (id, payload) -> times performed.
    payloads: dict[tuple[str, Any], int] = field(default_factory=lambda: defaultdict(int))
    #: Shards with a perform running now, and the overlaps seen.
    running: set[int] = field(default_factory=set)
    overlaps: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, shard: int) -> float:
        with self.lock:
            if shard in self.running:
                self.overlaps.append(shard)
            self.running.add(shard)
        return time.monotonic()

    def end(self, shard: int, started: float, batch: dict[str, list[Any]]) -> None:
        with self.lock:
            self.running.discard(shard)
            self.spans[shard].append((started, time.monotonic()))
            for job_id, payloads in batch.items():
                for payload in payloads:
                    self.payloads[(job_id, payload)] += 1


class Scripted(lowkiq.Worker):
    """Two shards, retries at once, and each job doing what its payload's kind says: ``f``
    fails its batch the first time, ``p`` fails only its own id the first time
    (BatchFailed), ``y`` gives its later payloads back the first time (yield_rest), ``c``
    cancels its own id the first time (``Worker.actions().cancel``, heard by the process
    at once, as its coordinator hears it on the nudge): it ends as cancelled, never
    performed; anything else succeeds.  :attr:`performs` records the payloads performed
    successfully."""

    shards_count = 2
    batch_size = 1
    #: Every perform's span by shard; the payloads performed successfully.
    performs = Performs()
    #: (id, payload) that already failed or yielded once.
    once: set[tuple[str, Any]] = set()

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.0

    @classmethod
    def perform(cls, batch: dict[str, list[Any]]) -> None:
        shard = cls.queue().shard_of(next(iter(batch)))
        started = cls.performs.start(shard)
        done: dict[str, list[Any]] = {}
        try:
            cls._act(batch, done)
        finally:
            cls.performs.end(shard, started, done)

    @classmethod
    def _act(cls, batch: dict[str, list[Any]], done: dict[str, list[Any]]) -> None:
        """Perform ``batch``, putting in ``done`` the payloads performed once it
        returns or raises BatchFailed (nothing when it raises anything else)."""
        failed: dict[str, Exception] = {}
        yielding: list[str] = []
        cancelled: list[str] = []
        for job_id, payloads in batch.items():
            first = (job_id, payloads[0])
            kind = str(payloads[0])[:1]
            if first in cls.once:
                continue
            if kind == "f":
                cls.once.add(first)
                raise RuntimeError("fails its batch once")
            if kind == "s":
                cls.once.add(first)
                raise lowkiq.Snooze(0)  # due again at once, not a failure
            if kind == "p":
                cls.once.add(first)
                failed[job_id] = RuntimeError("fails its id once")
            if kind == "y" and len(payloads) > 1:
                yielding.append(job_id)
            if kind == "c":
                # A cancel that raises cancelled nothing: the batch fails, its retry cancels.
                cls.actions().cancel([job_id])
                cls.once.add(first)
                cancelled.append(job_id)
        if cancelled:
            state = performing.get()
            assert state is not None
            handler = state.handler
            CANCELLED.add((handler.queue.name, handler.shard, handler.batch), cancelled)
        if failed:
            # yield_rest counts only when perform returns: under BatchFailed the ids it
            # does not name are acked whole (docs/guides/workers.md), so none yields.
            done.update((i, payloads) for i, payloads in batch.items() if i not in failed)
            raise lowkiq.BatchFailed(failed)
        running = lowkiq.current_batch()
        assert running is not None
        for job_id in yielding:
            cls.once.add((job_id, batch[job_id][0]))
            running.yield_rest(job_id, batch[job_id][1:])
        done.update(
            (i, payloads[:1] if i in yielding else payloads)
            for i, payloads in batch.items()
            if i not in cancelled
        )


class ScriptedCapped(Scripted):
    """One batch of a group at a time (group claims)."""

    group_concurrency = 1
