"""Every Redis key name of lowkiq, built in this one place.

A queue is ``shards_count`` independent shards, and every key of one shard
carries the hash tag ``{queue_name:shard}``: a Lua script only ever touches
the keys of one shard, so it stays in one Redis Cluster slot, and the shards
of one queue spread over the cluster's masters.  There is no queue-wide key:
counters, the morgue and the indexes are per shard, and reads of a whole
queue (metrics, the dashboard's lists) read every shard and merge.  The Lua
scripts get the shard's prefix as ``KEYS[1]`` and build the same names
through :func:`lua_prelude`, which is generated from :data:`SUFFIXES` below.

Layout of one shard (``S`` = ``lowkiq:{name:shard}:``):

============================  =====  ==========================================
key                           type   content
============================  =====  ==========================================
S fresh                       zset   score 0, member ``id \\0 blob``, jobs with retry_count -1
S retry                       zset   score 0, member ``id \\0 blob``, jobs with retry_count >= 0
S retry_count                 zset   id -> retry_count, for jobs in ``retry``
S errors                      hash   id -> last error of a queued job that failed
S perform_in                  zset   id -> perform_in, every queued job
S due_since                   zset   id -> when it first became due, for the hot ids whose
                                     perform_in a pop moved behind the ids already due
                                     (the ``lag`` counts from it); absent in most shards
S processing                  hash   id -> packed job, the batch the shard is running
S (the prefix itself)         str    counter, +1 on every pop that takes jobs: the number of the
                                     batch in processing (its ack, fail, yield, bury and restore
                                     name it); never expires
S stale                       str    count of the calls that named a batch no longer in processing
S restores                    hash   id -> times a new owner restored the job from processing
                                     (its process died running it); gone once it ends
S wake                        list   at most one element: "the shard has new due work"
S payloads:<id>               zset   payload -> score, the payloads of a queued hot id
S hot_left                    hash   id -> ``batch count``: a hot id a pop left queued, and how
                                     many payloads that batch left behind (``superseded``)
S morgue                      zset   score 0, member ``id \\0 blob``, dead jobs
S morgue_updated_at           zset   id -> updated_at, dead jobs
S morgue_errors               hash   id -> error, dead jobs
S morgue_payloads:<id>        zset   payload -> score, the payloads of a dead hot id
S processed                   str    jobs processed successfully
S failed                      str    jobs whose batch failed
S discarded                   str    jobs dropped by ``lowkiq.Discard``
S snoozed                     str    jobs put off by ``lowkiq.Snooze``
S cancelled                   str    jobs of a running batch cancelled (``Worker.actions().cancel``)
S cancelled_ids               hash   id -> the batch it was cancelled in, while that batch may run:
                                     a restore of that batch settles it as cancelled; kept a day
S lease                       str    ``epoch owner``: the lease on the shard, with a TTL
S epoch                       str    counter, +1 on every acquisition of the shard; never expires
S hold                        str    set during a reshard: ``closed`` (a new shard, no pops yet)
                                     or ``retired`` (an old shard; kept for good)
S moving                      set    the ids of a retired shard a reshard is moving (read, not yet
                                     removed): actions wait for them, then act in the new shard
S rate_budget                 hash   ``tokens`` the shard reserved of its worker's rate limit,
                                     to spend from ``from`` (ms on Redis's clock); with a TTL
S group_base                  str    the shard's base group: every queued id not in
                                     ``group_of`` is of it (absent: the default group, ``""``)
S group_of                    hash   id -> group, queued jobs of a group other than the base one
                                     (``""``: the default group); only in an indexed shard
S group:<group>               zset   id -> perform_in, the queued ids of a group (the default
                                     group, jobs without one, is ``group:``); only in a shard
                                     whose queued ids are of more than one group, an *indexed*
                                     shard (then every queued id is in one)
S group_turns                 zset   group -> turn (a virtual time): groups with due jobs;
                                     pop serves the smallest turn (see ``_common.lua``)
S group_waits                 zset   group -> when its first job is due, groups not yet due
S morgue_group_of             hash   id -> group, dead jobs of a group
S events                      stream with ``Worker.track``: each job event of the shard
                                     (``event``, ``id``, then details), capped at about
                                     ``Worker.track_length`` entries (``MAXLEN ~``)
S schedule:<id>               hash   a periodic job's ticks (:mod:`lowkiq.periodic`): ``last``
                                     tick passed, ``enqueued`` tick, ``enqueued_at``, ``runs``,
                                     ``run_now_at`` (ms; Redis's clock), in its job id's shard
S schedule_log:<id>           list   ``tick enqueued_at kind by``: its latest enqueues, newest first
S schedules                   set    the ids of the periodic jobs whose state is in the shard
S wf_outbox                   hash   workflow members of the shard that ended or failed, not yet
                                     told to their workflow (:mod:`lowkiq.workflows.relay`):
                                     field ``state \\0 workflow \\0 instance \\0 member``, value 1;
                                     or ``a \\0 <batch>``: an acked batch whose area was copied
                                     to ``wf_done:<batch>``
S wf_done:<batch>             hash   a copy of the processing area of an acked batch that held
                                     workflow members, until relayed (its members are done)
S once:<name>                 str    a push made once (a workflow's callback or released job):
                                     a push naming it again adds nothing; kept
                                     ``settings.workflow_ttl``
============================  =====  ==========================================

An id's shard is ``base + crc32(id) % shards_count``; every key of an id is in
the shard of that id.  ``base`` is 0 until the queue is resharded
(:mod:`lowkiq.storage.layout`): a reshard numbers the new shards after the old
ones, so a shard number is never used twice and no key is renamed.

The layout of a queue (``L`` = ``lowkiq:{name:layout}:``, a slot of its own):

========================  =====  ==========================================
key                       type   content
========================  =====  ==========================================
L layout                  hash   ``base``, ``count``: the shards new jobs go to; during a
                                 reshard also ``from_base``, ``from_count``, ``started_at``,
                                 ``moved`` (jobs moved so far); written by the first
                                 process using the queue (base 0, the class's count)
L retired                 set    the old shards (numbers) whose jobs were all moved
L lock                    str    the process running the reshard command, with a TTL
========================  =====  ==========================================

The rate limit of a queue (:mod:`lowkiq.limits.rate_limit`; ``R`` = ``lowkiq:{name:rate}:``, a
slot of its own): ``R bucket``, a hash: ``tokens`` (below 0 while reservations run ahead of
the refill), ``at`` (ms on Redis's clock of the last refill), ``taken`` (tokens reserved so
far), ``waited`` (reservations that had to wait for the refill).

The batches of each group in flight (``Worker.group_concurrency``,
:mod:`lowkiq.storage.group_claims`; ``C`` = ``lowkiq:{name:groups}:``, a slot of its own):
``C held:<group>``, a zset: ``shard epoch`` of each batch running jobs of the group ->
when its claim expires (ms on Redis's clock; renewed while it runs); ``C full``, a set:
the groups at the cap. Under a per-group rate limit: ``C bucket:<group>``, a hash
``tokens``, ``at`` (gone once full again); ``C dry``, a zset: group -> when its bucket
holds a token again (ms); ``C rate``, a hash: ``taken`` (tokens spent so far),
``waited`` (claims refused for a group out of tokens). The groups set at run time
(:mod:`lowkiq.storage.group_limits`): ``C limits``, a hash: ``paused:<group>`` = 1,
``cap:<group>`` (its own cap), ``rate:<group>`` (its own rate, ``RateLimit.encode``).

Metrics history of a queue (:mod:`lowkiq.telemetry`; one hash tag per queue,
``T`` = ``lowkiq:{name:metrics}:``, so a queue's metrics are one slot apart from its shards):

========================  =====  ==========================================
key                       type   content
========================  =====  ==========================================
T minute:<m>              hash   what the workers did in minute m (unix time // 60); kept 72 h
T 10min:<n>               hash   the same, summed over minutes 10n to 10n + 9; kept 72 h
T hour:<h>                hash   the same, summed over hour h (unix time // 3600); kept 72 h
T totals                  hash   the same, summed since the queue's first perform
T second:<m>              hash   jobs processed and failed in each second of minute m:
                                 ``<s>p``, ``<s>f`` (:mod:`lowkiq.telemetry.recent`);
                                 kept 10 minutes after the minute
T group_waits             hash   the queue waits of its top groups and the rest
                                 (:mod:`lowkiq.telemetry.group_waits`):
                                 field group, NUL, slot: counts;
                                 group, NUL, ``sum``: seconds
T group_jobs              zset   group -> its jobs (halved hourly), the groups kept
T group_jobs_at           str    when they were last halved (unix seconds)
========================  =====  ==========================================

Their fields but ``second``'s (:data:`lowkiq.telemetry.counts.FIELDS`): ``n``
performs, ``f`` performs in which a job failed, ``j`` jobs, ``fj`` jobs that
failed (retried or killed), ``dj`` jobs dropped by ``lowkiq.Discard``, ``yj`` jobs
that gave payloads back (``yield_rest``), ``p`` payloads,
``t`` perform time (µs), ``w`` queue wait (µs, summed over jobs), ``d0``…
perform-time and ``w0``… queue-wait histogram buckets; a field that would be 0
is absent.

Ownership (one hash tag for the whole installation, ``M`` = ``lowkiq:{lowkiq}:``):

========================  =====  ==========================================
key                       type   content
========================  =====  ==========================================
M processes               zset   process id -> heartbeat expiry, ms on Redis's clock
M process:<id>            hash   ``info`` (JSON), ``weight`` (threads; 0 when quiet),
                                 ``queues`` (JSON list), ``beat`` (ms), ``command``
M nudge:<id>              list   at most one element: "membership changed, look now"
M paused                  set    names of paused queues (:mod:`lowkiq.storage.pausing`)
M rate_limits             hash   queue name -> rate limit set at run time
                                 (:mod:`lowkiq.limits.rate_limit`)
========================  =====  ==========================================

A lease is the only right to change a shard: pop, ack, fail and restore take
the lease's token (``epoch owner``) and refuse unless it is the value of the
shard's ``lease``, so a process whose lease expired changes nothing.

A *blob* is the job's payloads: repeated ``>d`` score, ``>I`` length, payload
bytes, ascending by score (see :mod:`lowkiq.storage.blob`).

A *hot* id, one whose payloads outgrow :data:`lowkiq.storage.blob.SPILL_PAYLOADS`
or :data:`~lowkiq.storage.blob.SPILL_BYTES`, keeps them in a sorted set of its
own (member = payload bytes, score = score; ``ZADD LT`` keeps the smallest
score of equal payloads) and an empty blob in its lex member, so a push onto it
costs O(log n).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAMESPACE = "lowkiq"

#: Key suffix of each structure of a shard; keys in PER_ID get ``<id>`` appended.
SUFFIXES = {
    "fresh_lex_zset": "fresh",
    "retry_lex_zset": "retry",
    "retry_count_zset": "retry_count",
    "errors_hash": "errors",
    "perform_in_zset": "perform_in",
    "due_since_zset": "due_since",
    "processing_hash": "processing",
    # The shard's prefix itself (no suffix): the name costs a script nothing to build.
    "batch_counter": "",
    "restores_hash": "restores",
    "wake_list": "wake",
    "payloads_zset": "payloads:",
    "morgue_lex_zset": "morgue",
    "morgue_updated_at_zset": "morgue_updated_at",
    "morgue_errors_hash": "morgue_errors",
    "morgue_payloads_zset": "morgue_payloads:",
    "processed_counter": "processed",
    "failed_counter": "failed",
    "discarded_counter": "discarded",
    "snoozed_counter": "snoozed",
    "cancelled_counter": "cancelled",
    "cancelled_hash": "cancelled_ids",
    "hot_left_hash": "hot_left",
    "stale_counter": "stale",
    "lease": "lease",
    "epoch_counter": "epoch",
    "stopping_flag": "stopping",
    "hold": "hold",
    "moving_set": "moving",
    "rate_budget_hash": "rate_budget",
    "group_base": "group_base",
    "group_of_hash": "group_of",
    "group_ids_zset": "group:",
    "group_turns_zset": "group_turns",
    "group_waits_zset": "group_waits",
    "morgue_group_of_hash": "morgue_group_of",
    "events_stream": "events",
    "schedule_hash": "schedule:",
    "schedule_log_list": "schedule_log:",
    "schedules_set": "schedules",
    "wf_outbox_hash": "wf_outbox",
    "wf_done_hash": "wf_done:",
    "once_flag": "once:",
}

#: The metrics history's spans: their length in minutes -> their key's name.
SPAN_NAMES = {1: "minute", 10: "10min", 60: "hour"}

#: Keys with an argument: ``<id>`` appended.
PER_ID = {
    "payloads_zset",
    "morgue_payloads_zset",
    "schedule_hash",
    "schedule_log_list",
    "group_ids_zset",
    "once_flag",
    "wf_done_hash",
}


@dataclass(frozen=True)
class QueueKeys:
    """The key names of one queue, shard by shard."""

    queue_name: str

    def prefix(self, shard: int) -> str:
        """``lowkiq:{queue_name:shard}:``; passed to every script of the shard as ``KEYS[1]``."""
        return f"{NAMESPACE}:{{{self.queue_name}:{shard}}}:"

    def _key(self, name: str, shard: int) -> str:
        return self.prefix(shard) + SUFFIXES[name]

    def fresh_lex_zset(self, shard: int) -> str:
        """Jobs never failed (retry_count -1), members ``id\\0blob``."""
        return self._key("fresh_lex_zset", shard)

    def retry_lex_zset(self, shard: int) -> str:
        """Jobs waiting for a retry (retry_count >= 0), members ``id\\0blob``."""
        return self._key("retry_lex_zset", shard)

    def retry_count_zset(self, shard: int) -> str:
        """id -> retry_count of the jobs in :meth:`retry_lex_zset`."""
        return self._key("retry_count_zset", shard)

    def errors_hash(self, shard: int) -> str:
        """id -> last error of a queued job: a retry, or a dead job queued up again."""
        return self._key("errors_hash", shard)

    def perform_in_zset(self, shard: int) -> str:
        """id -> perform_in of every queued job of the shard."""
        return self._key("perform_in_zset", shard)

    def due_since_zset(self, shard: int) -> str:
        """id -> when it first became due, for hot ids a pop queued behind the due ids."""
        return self._key("due_since_zset", shard)

    def processing_hash(self, shard: int) -> str:
        """id -> packed job: the batch the shard is running."""
        return self._key("processing_hash", shard)

    def batch_counter(self, shard: int) -> str:
        """The number of the shard's last pop that took jobs: the batch in processing."""
        return self._key("batch_counter", shard)

    def wake_list(self, shard: int) -> str:
        """A one-element list pushed when the shard gets due work; threads block on it."""
        return self._key("wake_list", shard)

    def payloads_zset(self, shard: int, job_id: str) -> str:
        """payload -> score of a queued hot id (its lex member then has an empty blob)."""
        return self._key("payloads_zset", shard) + job_id

    def cancelled_hash(self, shard: int) -> str:
        """id -> the number of the batch a cancel found it running in: a restore of that
        batch settles the job as cancelled instead of queueing it again."""
        return self._key("cancelled_hash", shard)

    def hot_left_hash(self, shard: int) -> str:
        """id -> ``batch count``: a hot id its last pop left queued (batch ``batch``), and
        how many of its payloads were left behind then."""
        return self._key("hot_left_hash", shard)

    def morgue_payloads_zset(self, shard: int, job_id: str) -> str:
        """payload -> score of a dead hot id (its morgue member then has an empty blob)."""
        return self._key("morgue_payloads_zset", shard) + job_id

    def morgue_lex_zset(self, shard: int) -> str:
        """Dead jobs, members ``id\\0blob``."""
        return self._key("morgue_lex_zset", shard)

    def morgue_updated_at_zset(self, shard: int) -> str:
        """id -> when the dead job last entered the morgue."""
        return self._key("morgue_updated_at_zset", shard)

    def morgue_errors_hash(self, shard: int) -> str:
        """id -> the dead job's error."""
        return self._key("morgue_errors_hash", shard)

    def processed_counter(self, shard: int) -> str:
        """Count of the shard's jobs processed successfully."""
        return self._key("processed_counter", shard)

    def failed_counter(self, shard: int) -> str:
        """Count of the shard's jobs whose batch failed."""
        return self._key("failed_counter", shard)

    def discarded_counter(self, shard: int) -> str:
        """Count of the shard's jobs dropped without a retry (``lowkiq.Discard``)."""
        return self._key("discarded_counter", shard)

    def cancelled_counter(self, shard: int) -> str:
        """Count of the shard's jobs cancelled while their batch ran."""
        return self._key("cancelled_counter", shard)

    def snoozed_counter(self, shard: int) -> str:
        """Count of the shard's jobs put off without a failure (``lowkiq.Snooze``)."""
        return self._key("snoozed_counter", shard)

    def stale_counter(self, shard: int) -> str:
        """Count of the calls that named a batch no longer in the shard's processing area."""
        return self._key("stale_counter", shard)

    def lease(self, shard: int) -> str:
        """The lease on the shard: ``epoch owner``, expiring unless renewed."""
        return self._key("lease", shard)

    def epoch_counter(self, shard: int) -> str:
        """How many times the shard's lease was acquired; never expires."""
        return self._key("epoch_counter", shard)

    def restores_hash(self, shard: int) -> str:
        """id -> how many times its batch was restored by a new owner (its process died
        running it); ``\0`` + id -> how many times it yielded (``yield_rest``)."""
        return self._key("restores_hash", shard)

    def stopping_flag(self, shard: int) -> str:
        """The lease token of an owner that announced it is stopping with a batch
        running; its next owner restores that batch without counting a restore."""
        return self._key("stopping_flag", shard)

    def hold(self, shard: int) -> str:
        """``closed`` or ``retired`` while the queue is resharded: no batch is popped."""
        return self._key("hold", shard)

    def moving_set(self, shard: int) -> str:
        """The ids of a retired shard whose jobs a reshard is moving (read, not removed)."""
        return self._key("moving_set", shard)

    def schedule_hash(self, shard: int, schedule_id: str) -> str:
        """The ticks of the periodic job ``schedule_id`` (its job id's shard)."""
        return self._key("schedule_hash", shard) + schedule_id

    def schedule_log_list(self, shard: int, schedule_id: str) -> str:
        """``tick enqueued_at kind by`` of the periodic job's latest enqueues, newest first."""
        return self._key("schedule_log_list", shard) + schedule_id

    def schedules_set(self, shard: int) -> str:
        """The ids of the periodic jobs whose ``schedule_hash`` is in the shard."""
        return self._key("schedules_set", shard)

    @property
    def layout_hash(self) -> str:
        """Where the queue's shards are (:mod:`lowkiq.storage.layout`)."""
        return f"{NAMESPACE}:{{{self.queue_name}:layout}}:layout"

    @property
    def retired_set(self) -> str:
        """The old shards a running reshard has emptied."""
        return f"{NAMESPACE}:{{{self.queue_name}:layout}}:retired"

    @property
    def reshard_lock(self) -> str:
        """Held by the one command resharding the queue."""
        return f"{NAMESPACE}:{{{self.queue_name}:layout}}:lock"

    def rate_budget_hash(self, shard: int) -> str:
        """The tokens the shard reserved of its worker's rate limit, and from when."""
        return self._key("rate_budget_hash", shard)

    def group_base(self, shard: int) -> str:
        """The shard's base group: that of its queued ids without an entry in
        :meth:`group_of_hash` (absent: the default group)."""
        return self._key("group_base", shard)

    def group_of_hash(self, shard: int) -> str:
        """id -> group of the shard's queued jobs of a group other than the base one."""
        return self._key("group_of_hash", shard)

    def group_ids_zset(self, shard: int, group: str) -> str:
        """id -> perform_in of the queued ids of ``group`` (``""``: the default group);
        only in a shard that holds a job of a group."""
        return self._key("group_ids_zset", shard) + group

    def group_turns_zset(self, shard: int) -> str:
        """group -> turn of the shard's groups with due jobs (pop serves the smallest)."""
        return self._key("group_turns_zset", shard)

    def group_waits_zset(self, shard: int) -> str:
        """group -> when its first job is due, of the shard's groups with none due yet."""
        return self._key("group_waits_zset", shard)

    def morgue_group_of_hash(self, shard: int) -> str:
        """id -> group of the shard's dead jobs of a group."""
        return self._key("morgue_group_of_hash", shard)

    def events_stream(self, shard: int) -> str:
        """The shard's job events, with ``Worker.track`` (a capped stream)."""
        return self._key("events_stream", shard)

    @property
    def rate_bucket_hash(self) -> str:
        """The queue's rate-limit token bucket (a slot of its own): ``tokens``, ``at``,
        ``taken``, ``waited``."""
        return f"{NAMESPACE}:{{{self.queue_name}:rate}}:bucket"

    @property
    def group_claims_prefix(self) -> str:
        """``lowkiq:{queue_name:groups}:``: the claims of ``Worker.group_concurrency``."""
        return f"{NAMESPACE}:{{{self.queue_name}:groups}}:"

    @property
    def metrics_prefix(self) -> str:
        """``lowkiq:{queue_name:metrics}:``; passed to the metrics history script as ``KEYS[1]``."""
        return f"{NAMESPACE}:{{{self.queue_name}:metrics}}:"

    def span_hash(self, minutes: int, number: int) -> str:
        """What the queue's workers did in span ``number`` of ``minutes`` minutes (1, 10
        or 60: minute ``number``, minutes ``10 * number`` to ``10 * number + 9``, hour
        ``number``); kept 72 h."""
        return f"{self.metrics_prefix}{SPAN_NAMES[minutes]}:{number}"

    @property
    def totals_hash(self) -> str:
        """The fields of :meth:`span_hash` summed over all time (Prometheus's counters)."""
        return f"{self.metrics_prefix}totals"

    def seconds_hash(self, minute: int) -> str:
        """Jobs processed and failed in each second of ``minute`` (``unix time // 60``)."""
        return f"{self.metrics_prefix}second:{minute}"


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

    @property
    def state_hash(self) -> str:
        """The control plane's counters: ``version`` (grows when a process joins, leaves,
        lapses or changes its weight or queues), ``config`` (grows when a queue is paused
        or resumed or a reshard changes shards), the assignment's ``generation`` and the
        version it was computed from (``assigned``), and the ``assigner`` process with
        the end of its role (``assigner_until``, ms on Redis's clock)."""
        return OWNERSHIP_PREFIX + "state"

    @property
    def assignment_hash(self) -> str:
        """process id -> its assigned shards (JSON ``{queue: [shard, ...]}``)."""
        return OWNERSHIP_PREFIX + "assignment"

    @property
    def owners_hash(self) -> str:
        """``queue:shard`` -> the id of the process it is assigned to."""
        return OWNERSHIP_PREFIX + "owners"

    @property
    def paused_set(self) -> str:
        """The names of the paused queues: their shards take no new batches."""
        return OWNERSHIP_PREFIX + "paused"

    @property
    def cancels_stream(self) -> str:
        """The running batches ``Worker.actions().cancel`` cancelled, one entry per batch
        (``queue``, ``shard``, ``batch``, ``ids`` joined by NUL): every process reads the
        entries added since it last looked when the config version moves, and flags its
        matching batches.  Trimmed to the last 10 minutes on every cancel, and gone 10
        minutes after the last one."""
        return OWNERSHIP_PREFIX + "cancels"

    @property
    def rate_limits_hash(self) -> str:
        """queue name -> the rate limit set at run time, overriding the class's."""
        return OWNERSHIP_PREFIX + "rate_limits"


#: A Lua comment: from ``--`` to the end of the line (lowkiq's scripts put none in a string).
_LUA_COMMENT = re.compile(r"--[^\n]*")


def lua_prelude(code: str | None = None) -> str:
    """Lua that defines ``keys_at(prefix)``, a table of the key names of the shard whose
    prefix is given (``t.<name>``, or ``t.<name>(id)`` for per-id keys), and ``K``,
    that table for the script's own shard (``KEYS[1]``, also ``P``).

    With ``code``, only the names it uses (every name costs a string per call).
    """
    return f"local P = KEYS[1]\n{lua_keys_at(code)}local K = keys_at(P)\n"


def lua_keys_at(code: str | None = None) -> str:
    """Lua that defines ``keys_at(prefix)`` alone (see :func:`lua_prelude`); with
    ``code``, only the names it uses."""
    # One table constructor: Lua sizes the table once (assigning the fields one by one
    # grows it several times, on every call).
    lines = ["local function keys_at(prefix)", "  return {"]
    # A name in a comment only costs as much as one in code: comments are left out.
    used = None if code is None else _LUA_COMMENT.sub("", code)
    for name, suffix in SUFFIXES.items():
        if used is not None and f".{name}" not in used:
            continue
        if name in PER_ID:
            lines.append(f'    {name} = function(id) return prefix .. "{suffix}" .. id end,')
        else:
            lines.append(f'    {name} = prefix .. "{suffix}",')
    lines += ["  }", "end"]
    return "\n".join(lines) + "\n"
