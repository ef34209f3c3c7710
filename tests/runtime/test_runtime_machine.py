"""One real dispatcher against a real Redis, driven by a Hypothesis state machine:
random interleavings of enqueues (ids that merge; plain jobs, jobs that fail once,
fail their own id once or yield their rest once; with or without a group), turns,
Redis faults on a coming call of the dispatcher (:mod:`tests.runtime.faults`),
hand-overs of a shard and waits for the executor.

After every step:

* no shard ran two batches at once;
* the dispatcher's turn never raised anything but a Redis error, and no executor
  thread died.

At the end, with the faults off, the dispatcher is turned until everything is done,
and every enqueued payload was performed (successfully) at least once, or is dead:
nothing was acked unperformed, nothing lost.
"""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from typing import Any, ClassVar

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import lowkiq
from lowkiq.ownership import leases
from lowkiq.ownership.events import Grant, Revoke
from lowkiq.runtime.dispatcher import Dispatcher
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.storage.metrics import queue_metrics
from lowkiq.storage.queue import Queue
from tests.runtime.faults import KINDS, Fault, FaultyClient, Performs, Scripted, ScriptedCapped
from tests.runtime.serving import dispatcher_of, ids_by_shard

#: Seconds a turn that popped nothing may wait: below the dispatcher's shortest
#: blocking wait, so an idle turn costs a few milliseconds.
POLL_INTERVAL = 0.005
#: What a job does the first time its payload comes first in a batch, by the payload's
#: first letter: ``a`` nothing special, ``f`` fails its batch, ``p`` fails its own id
#: (BatchFailed), ``y`` gives its later payloads back (yield_rest).
JOB_KINDS = ("a", "f", "p", "y")
#: Job ids per shard: few, so that enqueues merge onto queued ids.
IDS_PER_SHARD = 3
#: The group of a job id, by its index in the machine's ids (an id keeps its group).
GROUPS = (None, "g0", "g1", "g0")
#: One enqueue: (index of the id in the machine's ids, kind of its payload) per job.
JOBS = st.lists(
    st.tuples(st.integers(0, 2 * IDS_PER_SHARD - 1), st.sampled_from(JOB_KINDS)),
    min_size=1,
    max_size=3,
)
#: Most seconds of the final drain (a batch restored after a fault is a suspect, and
#: runs alone: another one waits, held, half a second at a time).
DRAIN_SECONDS = 15.0


class RearmedFault(Fault):
    """A fault armed from the start that fails no call until :meth:`arm` names one."""

    def __init__(self) -> None:
        super().__init__(at=0, armed=True)

    def arm(self, after: int, kind: str) -> None:
        """Fail the ``after``-th call from now, in the way ``kind`` says."""
        self.at = self.calls + after
        self.kind = kind
        self.fired = False

    def disarm(self) -> None:
        """Fail no call any more."""
        self.at = 0


class RuntimeMachine(RuleBasedStateMachine):
    """One dispatcher serving both shards of a worker, on a client that fails the
    calls the machine names."""

    client: ClassVar[redis.Redis]

    def __init__(self) -> None:
        super().__init__()
        self.client.flushall()
        self.fault = RearmedFault()
        self.stack = contextlib.ExitStack()
        self.worker: type[Scripted] = Scripted
        self.dispatcher: Dispatcher | None = None
        self.queue: Queue | None = None
        self.ids: list[str] = []
        #: Every (id, payload) enqueued.
        self.expected: set[tuple[str, str]] = set()
        #: What turn() raised that is not a Redis error.
        self.raised: list[str] = []
        self.enqueued = 0
        self.hand_overs = 0
        #: False while a step runs and after one failed: the final checks are then skipped
        #: (they would hide the failure).
        self.clean = True

    # -- helpers ------------------------------------------------------------------------

    @property
    def serving(self) -> tuple[Dispatcher, Queue]:
        assert self.dispatcher is not None and self.queue is not None
        return self.dispatcher, self.queue

    def turn(self) -> None:
        """One turn of the dispatcher; a Redis error is what a fault makes, anything else
        is recorded (the process would only log it)."""
        dispatcher, _ = self.serving
        try:
            dispatcher.turn()
        except redis.RedisError:
            pass
        except Exception as exc:  # noqa: BLE001 - the invariant reports it
            self.raised.append(f"{exc!r}\n{traceback.format_exc()}")

    def drained(self) -> bool:
        """Nothing in flight, unacked, queued or in a processing area."""
        dispatcher, _ = self.serving
        if dispatcher.in_flight or dispatcher.leaving:
            return False
        if any(h.unacked for h in dispatcher.handlers):
            return False
        metrics = queue_metrics(self.worker.queue())
        return metrics["length"] == 0 and metrics["busy"] == 0

    def state(self) -> str:
        """What the dispatcher and the queue hold, for a drain that never ends."""
        dispatcher, _ = self.serving
        handlers = [
            f"shard {h.shard}: unacked={h.unacked} lost={h.lost} unsure={h.unsure} "
            f"resting={h.not_before > time.monotonic()} lapsed={h.lapsed()}"
            for h in dispatcher.handlers
        ]
        return (
            f"in flight {list(dispatcher.in_flight)}, leaving {list(dispatcher.leaving)}, "
            f"handlers {handlers}, metrics {dict(queue_metrics(self.worker.queue()))}"
        )

    # -- rules --------------------------------------------------------------------------

    @initialize(
        capped=st.booleans(),
        batch_size=st.integers(1, 2),
        threads=st.integers(1, 2),
        jobs=JOBS,
    )
    def start(
        self, capped: bool, batch_size: int, threads: int, jobs: list[tuple[int, str]]
    ) -> None:
        """Serve both shards of a worker (capped groups or not), with a first enqueue."""
        self.clean = False
        worker = ScriptedCapped if capped else Scripted
        worker.batch_size = batch_size
        worker.performs = Performs()
        worker.once = set()
        lowkiq.settings.workers = [worker]
        self.worker = worker
        self.ids = [i for ids in ids_by_shard(worker.queue(), IDS_PER_SHARD).values() for i in ids]
        own = FaultyClient(self.client, self.fault)
        self.dispatcher, self.queue = self.stack.enter_context(
            dispatcher_of(self.client, worker, threads, own=own, poll_interval=POLL_INTERVAL)
        )
        self.enqueue(jobs)

    @rule(jobs=JOBS)
    def enqueue(self, jobs: list[tuple[int, str]]) -> None:
        """Enqueue a new payload for each job (on a client that never fails)."""
        self.clean = False
        batch = []
        for index, kind in jobs:
            self.enqueued += 1
            job: dict[str, Any] = {"id": self.ids[index], "payload": f"{kind}{self.enqueued}"}
            group = GROUPS[index % len(GROUPS)]
            if group is not None:
                job["group"] = group
            batch.append(job)
            self.expected.add((job["id"], job["payload"]))
        self.worker.perform_async(batch)
        self.clean = True

    @rule(times=st.integers(1, 5))
    def turn_times(self, times: int) -> None:
        """Turn the dispatcher ``times`` times."""
        self.clean = False
        for _ in range(times):
            self.turn()
        self.clean = True

    @rule(after=st.integers(1, 4), kind=st.sampled_from(KINDS))
    def arm_fault(self, after: int, kind: str) -> None:
        """Fail the dispatcher's ``after``-th call from now (a fault not yet fired is
        replaced)."""
        self.fault.arm(after, kind)

    @rule(shard=st.integers(0, 1))
    def hand_over(self, shard: int) -> None:
        """The shard is asked back (its lease released once its batch is settled), then a
        new lease on it, a new owner's, is served by a new handler."""
        self.clean = False
        dispatcher, queue = self.serving
        key = (queue.name, shard)
        dispatcher.tell(Revoke(key))
        for _ in range(200):
            self.turn()
            if all(h.shard != shard for h in dispatcher.handlers) and key not in (
                dispatcher.leaving
            ):
                break
        assert all(h.shard != shard for h in dispatcher.handlers), "never given up"
        self.hand_overs += 1
        owner = f"owner{self.hand_overs}"
        lease, _, _ = leases.acquire(self.worker.queue(), shard, owner, 3600)
        if lease is None:  # its release failed: the old lease lapses (at once, here)
            self.client.delete(queue.keys.lease(shard))
            lease, _, _ = leases.acquire(self.worker.queue(), shard, owner, 3600)
        assert lease is not None
        dispatcher.tell(Grant(ShardHandler(self.worker, shard, queue, lease.token)))
        self.clean = True

    @rule(seconds=st.sampled_from([0.002, 0.01]))
    def wait(self, seconds: float) -> None:
        """Let the executor's threads perform."""
        time.sleep(seconds)

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def no_shard_ran_two_batches_at_once(self) -> None:
        overlaps = sorted(set(self.worker.performs.overlaps))
        if overlaps:
            self.clean = False
        assert not overlaps, f"two batches at once on shards {overlaps}"

    @invariant()
    def the_dispatcher_raised_only_redis_errors(self) -> None:
        if self.raised:
            self.clean = False
        assert not self.raised, "the dispatcher raised:\n" + "\n".join(self.raised)

    @invariant()
    def every_executor_thread_lives(self) -> None:
        if self.dispatcher is None:
            return
        alive = all(thread.is_alive() for thread in self.dispatcher.executor.threads)
        if not alive:
            self.clean = False
        assert alive, "an executor thread died"

    # -- the end ------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            if self.dispatcher is not None and self.clean:
                self.finish()
        finally:
            self.stack.close()

    def finish(self) -> None:
        """Turn without faults until everything is done; then every payload enqueued was
        performed, or is dead."""
        self.fault.disarm()
        deadline = time.monotonic() + DRAIN_SECONDS
        while True:
            with contextlib.suppress(redis.RedisError):
                if self.drained():
                    break
            assert time.monotonic() < deadline, f"not drained in {DRAIN_SECONDS} s: {self.state()}"
            self.turn()
        assert not self.raised, "the dispatcher raised:\n" + "\n".join(self.raised)
        assert not self.worker.performs.overlaps
        dead = {
            (job["id"], payload)
            for job in self.worker.queries().morgue_range_by_id("-", "+", limit=1000)
            for payload, _ in job["payloads"]
        }
        performed = set(self.worker.performs.payloads)
        lost = sorted(self.expected - performed - dead)
        assert not lost, f"never performed, and not dead: {lost}"


def test_random_interleavings_keep_the_runtime_invariants(redis_client: redis.Redis) -> None:
    RuntimeMachine.client = redis_client
    RuntimeMachine.TestCase.settings = settings(
        max_examples=500,
        stateful_step_count=15,
        deadline=None,
        database=None,
        # The machine's steps make Redis round trips and wait for threads, which Hypothesis
        # counts as generating its data; the function-scoped Redis client is reused by
        # every example on purpose (each example flushes it).
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    # Every failed batch and Redis error is logged as a warning: thousands of them.
    logger = logging.getLogger("lowkiq")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        RuntimeMachine.TestCase().runTest()
    finally:
        logger.setLevel(level)
        lowkiq.settings.workers = []
