"""Every Redis key name of lowkiq, built in this one place.

All keys of one queue share the hash tag ``{queue_name}``, so a Lua script that
touches several of them stays in one Redis Cluster slot.  The Lua scripts get
the queue's prefix as ``KEYS[1]`` and build the same names through
:func:`lua_prelude`, which is generated from :data:`SUFFIXES` below.

Layout of one queue (``P`` = ``lowkiq:{name}:``):

============================  =====  ==========================================
key                           type   content
============================  =====  ==========================================
P fresh_lex_zset              zset   score 0, member ``id \\0 blob``, jobs with retry_count -1
P retry_lex_zset              zset   score 0, member ``id \\0 blob``, jobs with retry_count >= 0
P retry_count_zset            zset   id -> retry_count, for jobs in retry_lex_zset
P errors_hash                 hash   id -> last error of a queued job that failed
P perform_in_zset:<s>         zset   id -> perform_in, every queued job of shard s
P processing_hash:<s>         hash   id -> packed job, the batch shard s is running
P wake_list:<s>               list   at most one element: "shard s has new due work"
P payloads_zset:<id>          zset   payload -> score, the payloads of a queued hot id
P morgue_lex_zset             zset   score 0, member ``id \\0 blob``, dead jobs
P morgue_updated_at_zset      zset   id -> updated_at, dead jobs
P morgue_errors_hash          hash   id -> error, dead jobs
P morgue_payloads_zset:<id>   zset   payload -> score, the payloads of a dead hot id
P processed_counter           str    jobs processed successfully
P failed_counter              str    jobs whose batch failed
P lease:<s>                   str    ``epoch owner``: the lease on shard s, with a TTL
P epoch:<s>                   str    counter, +1 on every acquisition of shard s; never expires
============================  =====  ==========================================

Ownership (one hash tag for the whole installation, ``M`` = ``lowkiq:{lowkiq}:``):

========================  =====  ==========================================
key                       type   content
========================  =====  ==========================================
M processes               zset   process id -> heartbeat expiry, ms on Redis's clock
M process:<id>            hash   ``info`` (JSON), ``weight`` (threads; 0 when quiet),
                                 ``queues`` (JSON list), ``beat`` (ms), ``command``
M nudge:<id>              list   at most one element: "membership changed, look now"
========================  =====  ==========================================

A lease is the only right to change a shard: pop, ack, fail and restore take
the lease's token (``epoch owner``) and refuse unless it is the value of
``lease:<s>``, so a process whose lease expired changes nothing.

A *blob* is the job's payloads: repeated ``>d`` score, ``>I`` length, payload
bytes, ascending by score (see :mod:`lowkiq.storage.blob`).

A *hot* id, one whose payloads outgrow :data:`lowkiq.storage.blob.SPILL_PAYLOADS`
or :data:`~lowkiq.storage.blob.SPILL_BYTES`, keeps them in a sorted set of its
own (member = payload bytes, score = score; ``ZADD LT`` keeps the smallest
score of equal payloads) and an empty blob in its lex member, so a push onto it
costs O(log n).  Per-id keys are named after the id alone: an id's shard is
``crc32(id) % shards_count``, so when keys move to per-shard hash tags
(``{name:shard}``, for Redis Cluster) a script derives them from the same
shard as the other keys it touches.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE = "lowkiq"

#: Key suffix of each structure; keys in SHARDED and PER_ID get an argument.
SUFFIXES = {
    "fresh_lex_zset": "fresh",
    "retry_lex_zset": "retry",
    "retry_count_zset": "retry_count",
    "errors_hash": "errors",
    "perform_in_zset": "perform_in:",
    "processing_hash": "processing:",
    "wake_list": "wake:",
    "payloads_zset": "payloads:",
    "morgue_lex_zset": "morgue",
    "morgue_updated_at_zset": "morgue_updated_at",
    "morgue_errors_hash": "morgue_errors",
    "morgue_payloads_zset": "morgue_payloads:",
    "processed_counter": "processed",
    "failed_counter": "failed",
    "lease": "lease:",
    "epoch_counter": "epoch:",
}

#: Keys with an argument: ``:<shard>`` or ``:<id>`` appended.
SHARDED = {"perform_in_zset", "processing_hash", "wake_list", "lease", "epoch_counter"}
PER_ID = {"payloads_zset", "morgue_payloads_zset"}


@dataclass(frozen=True)
class QueueKeys:
    """The key names of one queue."""

    queue_name: str

    @property
    def prefix(self) -> str:
        """``lowkiq:{queue_name}:``; passed to every script as ``KEYS[1]``."""
        return f"{NAMESPACE}:{{{self.queue_name}}}:"

    def _key(self, name: str) -> str:
        return self.prefix + SUFFIXES[name]

    @property
    def fresh_lex_zset(self) -> str:
        """Jobs never failed (retry_count -1), members ``id\\0blob``."""
        return self._key("fresh_lex_zset")

    @property
    def retry_lex_zset(self) -> str:
        """Jobs waiting for a retry (retry_count >= 0), members ``id\\0blob``."""
        return self._key("retry_lex_zset")

    @property
    def retry_count_zset(self) -> str:
        """id -> retry_count of the jobs in :attr:`retry_lex_zset`."""
        return self._key("retry_count_zset")

    @property
    def errors_hash(self) -> str:
        """id -> last error of a queued job: a retry, or a dead job queued up again."""
        return self._key("errors_hash")

    def perform_in_zset(self, shard: int) -> str:
        """id -> perform_in of every queued job of one shard."""
        return f"{self._key('perform_in_zset')}{shard}"

    def processing_hash(self, shard: int) -> str:
        """id -> packed job: the batch one shard is running."""
        return f"{self._key('processing_hash')}{shard}"

    def wake_list(self, shard: int) -> str:
        """A one-element list pushed when a shard gets due work; threads block on it."""
        return f"{self._key('wake_list')}{shard}"

    def payloads_zset(self, job_id: str) -> str:
        """payload -> score of a queued hot id (its lex member then has an empty blob)."""
        return f"{self._key('payloads_zset')}{job_id}"

    def morgue_payloads_zset(self, job_id: str) -> str:
        """payload -> score of a dead hot id (its morgue member then has an empty blob)."""
        return f"{self._key('morgue_payloads_zset')}{job_id}"

    @property
    def morgue_lex_zset(self) -> str:
        """Dead jobs, members ``id\\0blob``."""
        return self._key("morgue_lex_zset")

    @property
    def morgue_updated_at_zset(self) -> str:
        """id -> when the dead job last entered the morgue."""
        return self._key("morgue_updated_at_zset")

    @property
    def morgue_errors_hash(self) -> str:
        """id -> the dead job's error."""
        return self._key("morgue_errors_hash")

    @property
    def processed_counter(self) -> str:
        """Count of jobs processed successfully."""
        return self._key("processed_counter")

    @property
    def failed_counter(self) -> str:
        """Count of jobs whose batch failed."""
        return self._key("failed_counter")

    def lease(self, shard: int) -> str:
        """The lease on one shard: ``epoch owner``, expiring unless renewed."""
        return f"{self._key('lease')}{shard}"

    def epoch_counter(self, shard: int) -> str:
        """How many times one shard's lease was acquired; never expires."""
        return f"{self._key('epoch_counter')}{shard}"


OWNERSHIP_PREFIX = f"{NAMESPACE}:{{{NAMESPACE}}}:"


@dataclass(frozen=True)
class OwnershipKeys:
    """The key names of process membership, shared by every queue."""

    @property
    def prefix(self) -> str:
        """``lowkiq:{lowkiq}:``; passed to the membership scripts as ``KEYS[1]``."""
        return OWNERSHIP_PREFIX

    @property
    def processes_zset(self) -> str:
        """process id -> heartbeat expiry in ms on Redis's clock."""
        return OWNERSHIP_PREFIX + "processes"

    def process_hash(self, process_id: str) -> str:
        """What one process told about itself, and a command waiting for it."""
        return f"{OWNERSHIP_PREFIX}process:{process_id}"

    def nudge_list(self, process_id: str) -> str:
        """Pushed when membership changed or a command waits; the process blocks on it."""
        return f"{OWNERSHIP_PREFIX}nudge:{process_id}"


def lua_prelude(code: str | None = None) -> str:
    """Lua that defines ``K.<name>`` (or ``K.<name>(shard or id)``) from the prefix in ``KEYS[1]``.

    With ``code``, only the names it uses (every name costs a string per call).
    """
    lines = ["local P = KEYS[1]", "local K = {}"]
    for name, suffix in SUFFIXES.items():
        if code is not None and f"K.{name}" not in code:
            continue
        if name in SHARDED or name in PER_ID:
            lines.append(f'K.{name} = function(s) return P .. "{suffix}" .. s end')
        else:
            lines.append(f'K.{name} = P .. "{suffix}"')
    return "\n".join(lines) + "\n"
