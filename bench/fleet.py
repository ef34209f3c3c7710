"""Fleet scale: P simulated worker processes x S shards against one real Redis.

Every simulated process runs the real control plane: its own
:class:`~lowkiq.ownership.coordinator.Coordinator` (versioned beat, the elected
assigner, lease acquisition and hand-off wake-ups) and its renewer, on one
shared client of a private Redis.  Only the dispatcher is a stand-in: it gives a
shard back (releases its lease) as soon as it is asked, as an idle dispatcher
does.  The simulation runs every process's heartbeat at its
interval, staggered, and its renewals every ``lease_ttl / 3``.

It prints, for 1 and for 10 queues:
- steady state: Redis CPU of the control plane and the simulation's CPU per
  process (an upper bound of a coordinator's: it includes the simulation);
- one join, one leave (TERM), one replace (a join, then a leave): shards moved,
  the assigner's time to recompute, and the time until every shard is leased
  by its assigned owner;
- a full rolling deploy (each process replaced once; new joins first, and old
  leaves first): shards moved in all and unowned shard-seconds.
Usage: python bench/fleet.py [--processes 1000] [--shards 10000] [--queues 1 10]
       [--steady 10] [--deploy-processes 100]
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from _machine import machine

import lowkiq
from lowkiq.ownership.coordinator import Coordinator, Plan
from lowkiq.ownership.events import Change, Grant, Released, Revoke
from lowkiq.ownership.leases import parse_owner
from lowkiq.ownership.membership import Membership, new_process_id
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.settings import Settings
from lowkiq.storage.keys import OwnershipKeys

KEYS = OwnershipKeys()


class StandInDispatcher:
    """A dispatcher that serves nothing and gives a shard back at once."""

    busy = 0

    def __init__(self) -> None:
        self.handlers: dict[tuple[str, int], ShardHandler] = {}
        self.to_release: list[ShardHandler] = []

    def tell(self, change: Change) -> None:
        if isinstance(change, Grant):
            self.handlers[change.handler.key] = change.handler
            return
        handler = self.handlers.pop(change.key, None)
        if handler is not None and isinstance(change, Revoke):
            self.to_release.append(handler)

    def pause(self, queues: frozenset[str]) -> None:
        pass

    def wake(self, client: Any) -> None:
        pass

    def running_batches(self) -> list[dict[str, object]]:
        return []


class SimProcess:
    """One simulated ``lowkiq worker`` process: the real coordinator, a stand-in dispatcher."""

    def __init__(self, client: redis.Redis, workers: list[type[lowkiq.Worker]], config: Settings):
        self.id = new_process_id(suffix=os.urandom(4).hex())
        self.dispatcher = StandInDispatcher()
        #: When its next heartbeat is due (time.monotonic), and how many it sent.
        self.beat_at = 0.0
        self.beats = 0
        queues = [worker.queue(client, config) for worker in workers]
        by_name = {worker.queue_name: worker for worker in workers}

        def make_handler(
            queue_name: str, shard: int, token: str, on_lost: Callable[[Any], None]
        ) -> ShardHandler:
            worker = by_name[queue_name]
            return ShardHandler(worker, shard, queues_by_name[queue_name], token, on_lost=on_lost)

        queues_by_name = {queue.name: queue for queue in queues}
        self.coordinator = Coordinator(
            client,
            Membership(client, self.id, config.lease_ttl),
            queues,
            Plan(),
            self.dispatcher,
            make_handler,
            config.lease_ttl,
            config.heartbeat_interval,
            1,
        )

    def beat(self) -> None:
        """One coordinator round, then the stand-in dispatcher gives back what it was asked."""
        self.beat_at = time.monotonic() + self.coordinator.heartbeat_interval
        self.beats += 1
        self.coordinator.beat()
        self.flush()

    def due(self, now: float) -> bool:
        """Whether its coordinator waits for a lease to expire by now (``next_wait``)."""
        retry_at = self.coordinator._retry_at
        return bool(retry_at) and retry_at <= now

    def renew_if_due(self, now: float) -> None:
        """Renew its leases when its renewer's timer would (no heartbeat carried a round
        in time: on a single server a heartbeat carries them when due)."""
        if now >= self.coordinator.renewer.own_round_at():
            self.coordinator.renewer.renew()

    def flush(self) -> None:
        if self.dispatcher.to_release:
            released, self.dispatcher.to_release = self.dispatcher.to_release, []
            from lowkiq.ownership import leases

            # As the dispatcher does: release, wake the next owners, report it.
            leases.release_many(leases.Lease(h.queue, h.shard, h.token) for h in released)
            self.coordinator.membership.handoff(h.key for h in released)
            self.coordinator.reports.post(Released(tuple(released)))
            self.coordinator.take_reports()

    def stop(self) -> None:
        """TERM: announce the stop, give every shard back, deregister."""
        self.coordinator.close()
        for key in list(self.dispatcher.handlers):
            self.dispatcher.tell(Revoke(key))
        self.flush()
        self.coordinator.release_remaining()
        self.coordinator.leave()


class Fleet:
    """The simulated processes and what their changes cost."""

    def __init__(self, client: redis.Redis, workers: list[type[lowkiq.Worker]], config: Settings):
        self.client = client
        self.workers = workers
        self.config = config
        self.processes: list[SimProcess] = []
        self.gone: list[SimProcess] = []
        self.queues = [worker.queue(client, config) for worker in workers]
        self.shards = sum(len(queue.shards) for queue in self.queues)

    def published_moves(self) -> int:
        """Shards moved by every publication so far."""
        return sum(p.coordinator.assigner.moves for p in self.processes + self.gone)

    def assigner_took(self) -> float:
        """Milliseconds spent computing and publishing assignments so far."""
        return sum(p.coordinator.assigner.took for p in self.processes + self.gone) * 1000

    def join(self) -> SimProcess:
        process = SimProcess(self.client, self.workers, self.config)
        self.processes.append(process)
        process.beat()
        return process

    def leave(self, process: SimProcess) -> None:
        self.processes.remove(process)
        self.gone.append(process)
        process.stop()

    def unleased(self) -> int:
        """Shards not leased by their assigned owner now."""
        owners = {k.decode(): v.decode() for k, v in self.client.hgetall(KEYS.owners_hash).items()}
        pipe = self.client.pipeline(transaction=False)
        names = []
        for queue in self.queues:
            for shard in queue.shards:
                pipe.get(queue.keys.lease(shard))
                names.append(f"{queue.name}:{shard}")
        tokens = pipe.execute()
        return sum(
            1
            for name, token in zip(names, tokens, strict=True)
            if token is None or owners.get(name) != parse_owner(token.decode())
        )

    def tick(self, nudges: bool = True) -> bool:
        """One turn of every process's loop: the heartbeats and renewals that are due,
        and (``nudges``) the processes whose nudge list fired or whose wanted lease
        expired; returns whether a nudge fired."""
        nudged: list[Any] = []
        if nudges:
            pipe = self.client.pipeline(transaction=False)
            for process in self.processes:
                pipe.lpop(KEYS.nudge_list(process.id))
            nudged = pipe.execute()
        now = time.monotonic()
        for index, process in enumerate(self.processes):
            woken = (nudged and nudged[index]) or process.due(now)
            if woken or process.beat_at <= now:
                process.beat()
            process.renew_if_due(now)
        return any(nudged)

    def settle(self, limit: float = 120.0) -> tuple[float, float]:
        """Run the fleet until every shard is leased by its assigned owner and no nudge is
        pending; returns (seconds, unowned shard-seconds)."""
        started = last = time.perf_counter()
        unowned = 0.0
        while True:
            fired = self.tick()
            missing = self.unleased()
            now = time.perf_counter()
            unowned += missing * (now - last)
            last = now
            if not missing and not fired:
                return now - started, unowned
            if now - started > limit:
                raise RuntimeError(f"not settled after {limit}s: {missing} shards unleased")

    def steady(self, seconds: float) -> tuple[float, float, float, float]:
        """Heartbeats and renewals at their intervals for ``seconds`` (no change): Redis
        CPU and, before, the same Redis's CPU idle (% of a core), simulation CPU per
        process (% of a core), beats per second."""
        count = len(self.processes)
        idle = idle_redis_cpu(self.client, min(seconds, 5.0))
        beats_before = self.beats()
        start_cpu = redis_cpu(self.client)
        start_own = own_cpu()
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            self.tick(nudges=False)
            time.sleep(0.002)
        wall = time.perf_counter() - started
        redis_share = (redis_cpu(self.client) - start_cpu) / wall * 100
        own_share = (own_cpu() - start_own) / wall / count * 100
        return redis_share, idle, own_share, (self.beats() - beats_before) / wall

    def beats(self) -> int:
        """Heartbeats sent so far by the live processes."""
        return sum(process.beats for process in self.processes)

    def renew_due(self) -> None:
        """Renew the leases of the processes whose renewal is due."""
        now = time.monotonic()
        for process in self.processes:
            process.renew_if_due(now)

    def stop(self) -> None:
        for process in list(self.processes):
            self.leave(process)


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def idle_redis_cpu(client: redis.Redis, seconds: float) -> float:
    """Redis's CPU (% of a core) over ``seconds`` with no client talking to it (its
    own timers: expiring keys, housekeeping): the baseline the steady state adds to."""
    start = redis_cpu(client)
    time.sleep(seconds)
    return (redis_cpu(client) - start) / seconds * 100


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker_classes(shards: int, queues: int) -> list[type[lowkiq.Worker]]:
    return [
        type(f"Fleet{number}", (lowkiq.Worker,), {"shards_count": shards // queues})
        for number in range(queues)
    ]


@contextmanager
def private_redis() -> Iterator[str]:
    from lowkiq.clients.embedded import start_server

    with tempfile.TemporaryDirectory() as directory:
        from pathlib import Path

        server = start_server(Path(directory))
        try:
            yield server.url
        finally:
            server.stop()


def change(fleet: Fleet, what: str, *actions: Any) -> None:
    """Run each action (a change) and let the fleet settle after it; print the shards all
    of them moved, the assigner's time for each change, and the time to settle the last."""
    before = fleet.published_moves()
    recomputes = []
    for action in actions:
        took_before = fleet.assigner_took()
        action()
        seconds, _ = fleet.settle()
        recomputes.append(f"{fleet.assigner_took() - took_before:.1f}")
    moved = fleet.published_moves() - before
    print(
        f"  {what:<22} moved {moved:>5} shards (S/P = {fleet.shards / len(fleet.processes):.0f}); "
        f"recompute {' + '.join(recomputes)} ms; "
        f"all leased by their owners after {seconds * 1000:5.0f} ms (simulated fleet)"
    )


def run(processes: int, shards: int, queues: int, steady: float, deploy: int) -> None:
    with private_redis() as url:
        client = redis.Redis.from_url(url)
        config = Settings(redis=lambda: redis.Redis.from_url(url))
        fleet = Fleet(client, worker_classes(shards, queues), config)
        print(f"P={processes}, S={shards} over {queues} queue(s)")
        started = time.perf_counter()
        for _ in range(processes):
            fleet.join()
            fleet.renew_due()
        fleet.settle(limit=600)
        print(f"  joined and settled in {time.perf_counter() - started:.1f}s")
        # This one heap holds the whole simulated fleet, a real worker's holds one
        # process: the assigner's timings must not include the garbage collector
        # scanning 1,000 coordinators, so what exists now is never scanned again.
        gc.freeze()
        redis_share, idle, own_share, rate = fleet.steady(steady)
        print(
            f"  steady state: Redis {redis_share:.2f} % of a core ({idle:.2f} % idle before: "
            f"control plane {redis_share - idle:.2f} %); coordinator "
            f"{own_share:.3f} % of a core per process (simulation included); "
            f"{rate:.0f} beats/s for {processes} processes at "
            f"{config.heartbeat_interval:g}s"
        )
        change(fleet, "one join", fleet.join)
        change(fleet, "one leave (TERM)", lambda: fleet.leave(fleet.processes[0]))
        change(fleet, "one replace", fleet.join, lambda: fleet.leave(fleet.processes[0]))
        fleet.stop()
        client.flushall()
    if deploy:
        rolling(deploy, shards * deploy // processes, queues)


def rolling(processes: int, shards: int, queues: int) -> None:
    for order in ("new joins first", "old leaves first"):
        with private_redis() as url:
            client = redis.Redis.from_url(url)
            config = Settings(redis=lambda: redis.Redis.from_url(url))
            fleet = Fleet(client, worker_classes(shards, queues), config)
            for _ in range(processes):
                fleet.join()
            fleet.settle(limit=600)
            before = fleet.published_moves()
            unowned = 0.0
            for old in list(fleet.processes):
                if order == "new joins first":
                    fleet.join()
                    unowned += fleet.settle()[1]
                    fleet.leave(old)
                else:
                    fleet.leave(old)
                    unowned += fleet.settle()[1]
                    fleet.join()
                unowned += fleet.settle()[1]
            moved = fleet.published_moves() - before
            print(
                f"  rolling deploy P={processes}, S={shards}, {queues} queue(s), {order}: "
                f"{moved} moves ({moved / shards:.2f} x S), {unowned:.1f} unowned shard-seconds"
            )
            fleet.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=10000)
    parser.add_argument("--queues", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--steady", type=float, default=10.0, help="seconds of steady state")
    parser.add_argument(
        "--deploy-processes",
        type=int,
        default=100,
        help="processes of the rolling deploy (its shards scale with them; 0: none)",
    )
    args = parser.parse_args()
    print(machine())
    for queues in args.queues:
        run(args.processes, args.shards, queues, args.steady, args.deploy_processes)


if __name__ == "__main__":
    main()
