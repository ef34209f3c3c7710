"""The app of bench/chaos.py: records every perform and writes it to a fenced store.

One of two workers runs (``CHAOS_ITERATING``):

* :class:`Chaos`, a plain worker: one ``perform`` per batch, 5 ms, one write of each
  id's newest version;
* :class:`ChaosSteps` (``CHAOS_ITERATING=1``), an :class:`lowkiq.IterableWorker`:
  ``perform_one`` takes :data:`STEP_SECONDS` per payload (a payload marked ``"slow"``
  takes that many seconds, longer than a deploy's grace) and writes its version, and
  ``max_perform_seconds`` is :data:`MAX_PERFORM_SECONDS`, so an id's merged burst is
  performed over several performs, the rest given back each time.

Records go to ``RECORD_URL``, a Redis the chaos run never kills nor disconnects:

* ``chaos:records`` (:class:`Chaos`): every perform of an id (versions, start, end,
  pid, fence, and the wait of its oldest payload since it was enqueued);
* ``chaos:steps`` (:class:`ChaosSteps`): every payload performed (id, version, fence,
  pid, the perform it was part of, start, end, wait), pushed by the script that
  writes the fenced store, so the list's order is the order of the writes;
  ``chaos:yields``: one entry per perform that gave payloads back (how many, after
  how long); ``chaos:slow:<pid>`` exists while that process performs a slow payload;
* ``chaos:store:<id>``: the fenced store, a hash ``{fence, version}`` per id (a
  compare-and-set on the fence, as a user's database would do it);
  ``chaos:refused`` counts the writes it refused (a lower fence than stored),
  ``chaos:stale`` lists the writes it accepted although a newer version was stored
  (there must be none).  :class:`ChaosSteps` writes every version, so a batch run
  again under a newer lease (its process died or froze before the ack) writes
  versions older than stored: with a higher fence such a write is counted in
  ``chaos:rewound``, and only one under the stored fence is stale;
* ``chaos:poison``: one entry per perform of :data:`POISON`, which ends its process
  with exit code :data:`POISON_EXIT`; ``chaos:exhausted``: the ids given to
  ``retries_exhausted``.

Environment: ``REDIS_URL`` (``redis+cluster://``: a Redis Cluster), ``RECORD_URL``,
``CHAOS_LEASE_TTL`` (seconds, default 2),
``CHAOS_RATE`` (the worker's rate limit in jobs per second; unset or 0: none),
``CHAOS_ITERATING`` (``1``: :class:`ChaosSteps`), ``CHAOS_GROUP_CAP``
(``Worker.group_concurrency``; unset or 0: none), ``CHAOS_WORKFLOWS`` (``1``: the
processes also run :class:`ChaosCallback`, the ``on_complete`` of the workflows that
``bench/chaos.py --workflows`` opens; each of its performs is pushed to
``chaos:callbacks``: workflow id, the status it was given, how many payloads the id
had, start, end, pid, fence).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time
from typing import Any

import redis

import lowkiq

#: The id whose perform ends the process (``os._exit``), as a segfault would.
POISON = "poison"
#: The exit code of a process :data:`POISON` killed.
POISON_EXIT = 77
#: The worker's rate limit, jobs per second (0: none).
RATE = float(os.environ.get("CHAOS_RATE") or 0)
GROUP_CAP = int(os.environ.get("CHAOS_GROUP_CAP") or 0) or None
#: Whether the run's worker is :class:`ChaosSteps`.
ITERATING = os.environ.get("CHAOS_ITERATING") == "1"
#: Seconds :meth:`ChaosSteps.perform_one` takes, at random between the two.
STEP_SECONDS = (0.005, 0.020)
#: :attr:`ChaosSteps.max_perform_seconds`.
MAX_PERFORM_SECONDS = 0.2

record = redis.Redis.from_url(os.environ["RECORD_URL"])
lowkiq.settings.lease_ttl = float(os.environ.get("CHAOS_LEASE_TTL", "2"))
lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 4
lowkiq.settings.poll_interval = 0.2
# A socket timeout below half the lease TTL, as the worker asks for at start: a renewal
# stuck on a dead connection must not outlast the lease.
# ``redis+cluster://`` (bench/chaos.py --cluster): a Redis Cluster.
CLUSTER_SCHEME = "redis+cluster://"
if os.environ["REDIS_URL"].startswith(CLUSTER_SCHEME):
    lowkiq.settings.redis = lambda: redis.RedisCluster.from_url(
        os.environ["REDIS_URL"].replace(CLUSTER_SCHEME, "redis://"),
        socket_timeout=0.9,
        socket_connect_timeout=0.9,
    )
else:
    lowkiq.settings.redis = lambda: redis.Redis.from_url(
        os.environ["REDIS_URL"], socket_timeout=0.9, socket_connect_timeout=0.9
    )

# Compare-and-set of (fence, version) per id: a write whose fence is lower than the
# stored one is refused; an accepted write whose version is lower than the stored one
# is a stale write the fence failed to stop.
#   KEYS[i]: chaos:store:<id i> (hash: fence, version)
#   ARGV[1]: the writer's fence; ARGV[2]: its pid; ARGV[i + 2]: the newest version of id i
STORE = record.register_script(
    """
local fence = tonumber(ARGV[1])
local refused = 0
for i, key in ipairs(KEYS) do
  local version = tonumber(ARGV[i + 2])
  local stored = redis.call('HMGET', key, 'fence', 'version')
  local stored_fence = tonumber(stored[1]) or -1
  local stored_version = tonumber(stored[2]) or -1
  if fence < stored_fence then
    refused = refused + 1
  else
    if version < stored_version then
      redis.call('RPUSH', 'chaos:stale', cjson.encode({key = key, version = version,
        fence = fence, stored_version = stored_version, stored_fence = stored_fence,
        pid = ARGV[2]}))
    end
    redis.call('HSET', key, 'fence', fence, 'version', version)
  end
end
if refused > 0 then redis.call('INCRBY', 'chaos:refused', refused) end
return refused
"""
)

# One payload's write: the compare-and-set of STORE for one version, and its record
# pushed to chaos:steps in the same script.  A lower version under a higher fence is a
# batch run again under a newer lease (chaos:rewound); under the same fence it is stale.
#   KEYS[1]: chaos:store:<id>
#   ARGV[1]: the writer's fence; ARGV[2]: its pid; ARGV[3]: the version;
#   ARGV[4]: the step's record (JSON)
STEP = record.register_script(
    """
local fence, version = tonumber(ARGV[1]), tonumber(ARGV[3])
redis.call('RPUSH', 'chaos:steps', ARGV[4])
local stored = redis.call('HMGET', KEYS[1], 'fence', 'version')
local stored_fence = tonumber(stored[1]) or -1
local stored_version = tonumber(stored[2]) or -1
if fence < stored_fence then
  redis.call('INCR', 'chaos:refused')
  return 0
end
if version < stored_version then
  if fence == stored_fence then
    redis.call('RPUSH', 'chaos:stale', cjson.encode({key = KEYS[1], version = version,
      fence = fence, stored_version = stored_version, stored_fence = stored_fence,
      pid = ARGV[2]}))
  else
    redis.call('INCR', 'chaos:rewound')
  end
end
redis.call('HSET', KEYS[1], 'fence', fence, 'version', version)
return 1
"""
)


def die_of_poison() -> None:
    """Note a perform of :data:`POISON` and end the process."""
    record.rpush("chaos:poison", json.dumps({"pid": os.getpid(), "at": time.time()}))
    os._exit(POISON_EXIT)


def fence() -> int:
    """The fence of the running batch's lease."""
    batch = lowkiq.current_batch()
    assert batch is not None and batch.lease is not None
    return batch.lease.fence


class Chaos(lowkiq.Worker):
    """Sees versioned updates `{"v": n, "t": enqueued at}` (score n) of a few hundred ids,
    and one :data:`POISON` job."""

    shards_count = 8
    batch_size = 5
    max_restores = 3
    rate_limit = lowkiq.RateLimit(RATE) if RATE else None
    group_concurrency = GROUP_CAP

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[dict[str, Any]]]) -> None:
        if POISON in payloads_by_id:
            die_of_poison()
        fenced_by = fence()
        start = time.time()
        time.sleep(0.005)
        ids = list(payloads_by_id)
        STORE(
            keys=[f"chaos:store:{i}" for i in ids],
            args=[fenced_by, os.getpid(), *(payloads_by_id[i][-1]["v"] for i in ids)],
        )
        end = time.time()
        rows = [
            json.dumps({"id": i, "vs": [p["v"] for p in ps], "start": start, "end": end,
                        "pid": os.getpid(), "fence": fenced_by,
                        "wait": start - min(p["t"] for p in ps)})
            for i, ps in payloads_by_id.items()
        ]  # fmt: skip
        record.rpush("chaos:records", *rows)

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        record.rpush("chaos:exhausted", *(job["id"] for job in jobs))


#: This process's performs, numbered: a step's record names its perform.
_performs = itertools.count()
#: The perform running in this thread: its name and how many payloads it performed.
_current = threading.local()


class ChaosSteps(lowkiq.IterableWorker):
    """:class:`Chaos`'s updates performed one at a time (:data:`STEP_SECONDS` each),
    the rest given back after :data:`MAX_PERFORM_SECONDS` or when the process stops,
    the shard is handed over or its lease may lapse."""

    shards_count = 8
    batch_size = 5
    max_restores = 3
    max_perform_seconds = MAX_PERFORM_SECONDS
    rate_limit = lowkiq.RateLimit(RATE) if RATE else None
    group_concurrency = GROUP_CAP

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[dict[str, Any]]]) -> None:
        """Name the perform for its steps' records; note what it gave back."""
        started = time.monotonic()
        _current.name = f"{os.getpid()}:{next(_performs)}"
        _current.steps = 0
        super().perform(payloads_by_id)
        given_back = sum(len(payloads) for payloads in payloads_by_id.values()) - _current.steps
        if given_back:
            after = time.monotonic() - started
            record.rpush("chaos:yields", json.dumps({"payloads": given_back, "after": after}))

    @classmethod
    def perform_one(cls, job_id: str, payload: dict[str, Any]) -> None:
        if job_id == POISON:
            die_of_poison()
        start = time.time()
        slow = payload.get("slow")
        if slow:
            busy = f"chaos:slow:{os.getpid()}"
            record.set(busy, job_id, px=int(slow * 1000))
            time.sleep(slow)
            record.delete(busy)
        else:
            time.sleep(random.uniform(*STEP_SECONDS))
        fenced_by = fence()
        step = {"id": job_id, "v": payload["v"], "fence": fenced_by, "pid": os.getpid(),
                "perform": _current.name, "start": start, "end": time.time(),
                "wait": start - payload["t"], "slow": bool(slow)}  # fmt: skip
        STEP(
            keys=[f"chaos:store:{job_id}"],
            args=[fenced_by, os.getpid(), payload["v"], json.dumps(step)],
        )
        _current.steps += 1

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        record.rpush("chaos:exhausted", *(job["id"] for job in jobs))


class ChaosCallback(lowkiq.Worker):
    """The ``on_complete`` of every workflow of ``bench/chaos.py --workflows``: records
    each perform (a workflow's callback performed twice shows as two records)."""

    shards_count = 4
    batch_size = 5

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[dict[str, Any]]]) -> None:
        fenced_by = fence()
        start = time.time()
        time.sleep(0.002)
        end = time.time()
        rows = [
            json.dumps({"workflow": workflow_id, "payloads": len(payloads),
                        "status": payloads[-1]["status"], "given": payloads[-1]["payload"],
                        "start": start, "end": end, "pid": os.getpid(), "fence": fenced_by})
            for workflow_id, payloads in payloads_by_id.items()
        ]  # fmt: skip
        record.rpush("chaos:callbacks", *rows)


#: The worker of the run.
WORKER: type[lowkiq.Worker] = ChaosSteps if ITERATING else Chaos
#: Whether the processes also run :class:`ChaosCallback` (``--workflows``).
WORKFLOWS = os.environ.get("CHAOS_WORKFLOWS") == "1"
lowkiq.settings.workers = [WORKER, ChaosCallback] if WORKFLOWS else [WORKER]
