"""The app of bench/chaos.py: records every perform and writes it to a fenced store.

Records go to ``RECORD_URL``, a Redis the chaos run never kills nor disconnects:

* ``chaos:records``: every perform of an id (versions, start, end, pid, fence, and the
  wait of its oldest payload since it was enqueued);
* ``chaos:store:<id>``: the fenced store, a hash ``{fence, version}`` per id written by
  :data:`STORE` (a compare-and-set on the fence, as a user's database would do it);
  ``chaos:refused`` counts the writes it refused (a lower fence than stored),
  ``chaos:stale`` lists the writes it accepted although a newer version was stored
  (there must be none);
* ``chaos:poison``: one entry per perform of :data:`POISON`, which ends its process
  with exit code :data:`POISON_EXIT`; ``chaos:exhausted``: the ids given to
  ``retries_exhausted``.

Environment: ``REDIS_URL``, ``RECORD_URL``, ``CHAOS_LEASE_TTL`` (seconds, default 2),
``CHAOS_RATE`` (the worker's rate limit in jobs per second; unset or 0: none).
"""

from __future__ import annotations

import json
import os
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

record = redis.Redis.from_url(os.environ["RECORD_URL"])
lowkiq.settings.lease_ttl = float(os.environ.get("CHAOS_LEASE_TTL", "2"))
lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 4
lowkiq.settings.poll_interval = 0.2
# A socket timeout below half the lease TTL, as the worker asks for at start: a renewal
# stuck on a dead connection must not outlast the lease.
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


class Chaos(lowkiq.Worker):
    """Sees versioned updates `{"v": n, "t": enqueued at}` (score n) of a few hundred ids,
    and one
    :data:`POISON` job."""

    shards_count = 8
    batch_size = 5
    max_restores = 3
    rate_limit = lowkiq.RateLimit(RATE) if RATE else None

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[dict[str, Any]]]) -> None:
        if POISON in payloads_by_id:
            record.rpush("chaos:poison", json.dumps({"pid": os.getpid(), "at": time.time()}))
            os._exit(POISON_EXIT)
        batch = lowkiq.current_batch()
        assert batch is not None and batch.lease is not None
        fence = batch.lease.fence
        start = time.time()
        time.sleep(0.005)
        ids = list(payloads_by_id)
        STORE(
            keys=[f"chaos:store:{i}" for i in ids],
            args=[fence, os.getpid(), *(payloads_by_id[i][-1]["v"] for i in ids)],
        )
        end = time.time()
        rows = [
            json.dumps({"id": i, "vs": [p["v"] for p in ps], "start": start, "end": end,
                        "pid": os.getpid(), "fence": fence,
                        "wait": start - min(p["t"] for p in ps)})
            for i, ps in payloads_by_id.items()
        ]  # fmt: skip
        record.rpush("chaos:records", *rows)

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        record.rpush("chaos:exhausted", *(job["id"] for job in jobs))


lowkiq.settings.workers = [Chaos]
