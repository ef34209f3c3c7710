"""Loads ``lua/*.lua`` once per process and registers them per Redis client.

Each script is the generated key prelude and the constants it shares with
:mod:`lowkiq.storage.blob`, then the helpers of
``lua/_common.lua`` it uses, then the script's own file.  Redis runs the whole
text on every call, so a script carries only the key names and helper
definitions it refers to.  redis-py's ``Script`` runs ``EVALSHA`` and loads
the script on ``NOSCRIPT``, so a restarted Redis needs nothing special.

The scripts of :data:`ALLOW_OOM` keep memory flat or free it (a heartbeat, a lease,
a pop, an ack, putting a batch back): they run on a full Redis too, so that a
worker started on one can drain it.  On Redis 7 each carries the ``allow-oom``
flag (``#!lua flags=allow-oom,allow-cross-slot-keys``; the second flag keeps what a
script without flags may do).  Redis 6.2 has no script flags: it refuses a script's
first write that may grow memory while Redis is full, but lets a script that has
already written go on (it must stay atomic); each of these scripts therefore starts
with an ``UNLINK`` of a key that never exists, a write that grows nothing.  A script
that adds jobs (``push``) has neither: on a full Redis it is refused, and the
producer told.
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import AskError, NoScriptError, RedisClusterException, TryAgainError

from lowkiq.clients.connection import Client, is_cluster, pipelined, pipelined_apart
from lowkiq.storage import blob
from lowkiq.storage.keys import lua_prelude

LUA_DIR = Path(__file__).with_name("lua")

#: Every script: the files of ``lua/`` but the shared ``_common.lua``.
SCRIPT_NAMES = tuple(sorted(p.stem for p in LUA_DIR.glob("*.lua") if not p.stem.startswith("_")))

#: The scripts that run on a full Redis: each keeps memory about flat (a heartbeat,
#: publishing who serves which shards, a field per process; taking or renewing a
#: lease; a pop, moving jobs from the queue to the processing area; putting a batch
#: back; a rate limit's bucket, a group's places, which come and go with batches) or
#: frees it (an ack, giving up a lease, leaving), so that a worker can drain a full
#: Redis.  Not a push, which adds jobs; nor a fail, whose error texts and
#: retries grow with every failing batch; nor the metrics history.
ALLOW_OOM = frozenset(
    {
        "membership_beat",
        "membership_leave",
        "assignment_publish",
        "lease_acquire",
        "lease_renew",
        "lease_renew_many",
        "lease_release",
        "announce_stop",
        "pop",
        "ack",
        "ack_yield",
        "restore",
        "rate_take",
        "group_claims",
    }
)
#: The first line of an :data:`ALLOW_OOM` script on Redis 7 and later.
FLAGS_SHEBANG = "#!lua flags=allow-oom,allow-cross-slot-keys\n"
#: The first statement of an :data:`ALLOW_OOM` script on Redis 6.2: a write that grows
#: nothing (the key is never written), after which Redis lets the script's other
#: writes through on a full server.
FIRST_WRITE_6 = "redis.call('unlink', KEYS[1] .. 'allow-oom')\n"


_DEFINITION = re.compile(r"^local (?:function )?(\w+)")
#: A name as a script refers to it: not a field (``K.name``) nor part of a longer name.
_NAME = re.compile(r"(?<![\w.])\w+")


def _definitions(common: str) -> list[tuple[str, str]]:
    """``(name, text)`` of each top-level ``local`` of ``common``, with its comments."""
    blocks: list[tuple[str, str]] = []
    pending: list[str] = []
    for line in common.splitlines(keepends=True):
        match = _DEFINITION.match(line)
        if match:
            blocks.append((match.group(1), "".join(pending) + line))
            pending = []
        elif blocks and not line.startswith("--") and line.strip():
            name, text = blocks[-1]
            blocks[-1] = (name, text + "".join(pending) + line)
            pending = []
        else:
            pending.append(line)
    return blocks


#: A Lua comment: from ``--`` (outside a string, as lowkiq's scripts write them) to the
#: end of the line.
_COMMENT = re.compile(r"--[^\n]*")


def _names(text: str) -> set[str]:
    """The names ``text`` refers to in code or strings (not in comments: a word in a
    comment would pull a helper into every call's chunk for nothing)."""
    return set(_NAME.findall(_COMMENT.sub("", text)))


@functools.cache
def _helpers() -> list[tuple[str, str, frozenset[str]]]:
    """``(name, text, names it refers to)`` of each helper of ``lua/_common.lua``."""
    return [
        (name, text, frozenset(_names(text)))
        for name, text in _definitions((LUA_DIR / "_common.lua").read_text())
    ]


@functools.cache
def source(name: str, track_length: int = 0, script_flags: bool = False) -> str:
    """The full Lua source of one script, as sent to Redis; with ``track_length``
    (``Worker.track``), the script records its job events in the shard's events stream
    capped at about that many entries (``TRACK``, false without tracking).  A script of
    :data:`ALLOW_OOM` runs on a full Redis: by its flags (``script_flags``: the server
    is Redis 7 or later), else by its first write (see the module)."""
    own = (LUA_DIR / f"{name}.lua").read_text()
    blocks = _helpers()
    used: set[str] = set()
    referred = _names(own)
    while added := [b for b in blocks if b[0] not in used and b[0] in referred]:
        for block_name, _, names in added:
            used.add(block_name)
            referred |= names
    helpers = "".join(block_text for block_name, block_text, _ in blocks if block_name in used)
    constants = "".join(
        f"local {constant} = {getattr(blob, constant)}\n"
        for constant in blob.LUA_CONSTANTS
        if constant in referred
    )
    if "TRACK" in referred:
        constants += f"local TRACK = {track_length or 'false'}\n"
    text = f"{lua_prelude(helpers + own)}{constants}\n{helpers}\n-- {name}.lua\n{own}"
    if name not in ALLOW_OOM:
        return text
    return FLAGS_SHEBANG + text if script_flags else FIRST_WRITE_6 + text


def supports_script_flags(client: Client) -> bool:
    """Whether every server of ``client`` (each master of a Redis Cluster) is Redis 7 or
    later, which takes script flags; ``False`` when a version cannot be read (the
    scripts then run as on Redis 6.2, which Redis 7 runs alike)."""
    cluster = getattr(client, "topology", client)  # a processing thread's cluster client
    try:
        if isinstance(cluster, redis.RedisCluster):
            servers: list[Any] = [
                node.redis_connection
                for node in cluster.get_primaries()  # type: ignore[no-untyped-call]
            ]
        else:
            servers = [client]
        versions = [
            str(redis.Redis.info(server, "server").get("redis_version", "")) for server in servers
        ]
    except (redis.RedisError, RedisClusterException, AttributeError):
        return False
    return bool(versions) and all(_major(version) >= 7 for version in versions)


def _major(version: str) -> int:
    """The major number of a ``redis_version`` (0 when it is not one)."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


class Scripts:
    """The lowkiq scripts registered on one client, as attributes named after their files."""

    def __init__(self, client: Client, track_length: int = 0) -> None:
        flags = _flags_of(client)
        for name in SCRIPT_NAMES:
            setattr(self, name, client.register_script(source(name, track_length, flags)))

    @classmethod
    def for_client(cls, client: Client, track_length: int = 0) -> Scripts:
        """The scripts registered on ``client``, made once per client (and per
        ``track_length``: a tracked worker's scripts record its job events)."""
        with _LOCK:
            scripts = _BY_CLIENT.get(client, {}).get(track_length)
        if scripts is not None:
            return scripts
        made = cls(client, track_length)  # asks the server's version: not under the lock
        with _LOCK:
            by_length = _BY_CLIENT.get(client)
            if by_length is None:
                by_length = _BY_CLIENT[client] = {}
            return by_length.setdefault(track_length, made)

    push: Script
    group_check: Script
    pop: Script
    ack: Script
    fail: Script
    restore: Script
    bury: Script
    morgue_queue_up: Script
    morgue_delete: Script
    kill_failed: Script
    delete_failed: Script
    perform_now: Script
    metrics: Script
    range_after: Script
    due_in: Script
    lease_acquire: Script
    lease_renew: Script
    lease_renew_many: Script
    lease_release: Script
    lease_evict: Script
    membership_beat: Script
    membership_leave: Script
    membership_command: Script
    membership_list: Script
    membership_snapshot: Script
    membership_nudge: Script
    membership_handoff: Script
    assignment_publish: Script
    history_add: Script
    reshard_hold: Script
    reshard_open: Script
    reshard_take: Script
    reshard_put: Script
    reshard_drop: Script
    reshard_counts: Script
    layout_begin: Script
    layout_lock: Script
    rate_take: Script
    schedule_tick: Script
    group_claims: Script
    group_delete: Script
    group_waits_add: Script
    jobs_cancel: Script
    cancel_announce: Script
    cancel_settle: Script
    superseded: Script


#: One script call: the script, its keys, its arguments.
ScriptCall = tuple[Script, Sequence[str], Sequence[Any]]


def run_pipelined(
    client: Client, calls: Sequence[ScriptCall], transaction: bool = False
) -> list[Any]:
    """Run script calls in one pipelined round trip; returns their replies in order.

    Each call is an ``EVALSHA`` (redis-py's pipelined ``Script`` would first ask
    ``SCRIPT EXISTS``, one more round trip).  The calls whose script Redis does
    not have (a restarted or flushed server) load it and run again in a second
    round trip; every other call has run once.  An error reply of any call is
    raised after all calls ran.  ``transaction``: all calls in one MULTI on a
    single server (on a Redis Cluster each call is atomic on its own).
    """
    replies = _execute(client, calls, transaction)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        _load([calls[i] for i in missing], client)
        again = _execute(client, [calls[i] for i in missing], transaction)
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def run_replicated(
    client: Client, call: ScriptCall, replicas: int, timeout_ms: int
) -> tuple[Any, int]:
    """Run one script call, then ``WAIT replicas timeout_ms`` on the same connection (one
    round trip): the reply, and how many replicas have the write (and every earlier
    write of that connection).  A script Redis lost is loaded and the call run again.
    """
    script, keys, args = call
    if isinstance(client, redis.RedisCluster):
        # The master of the call's slot, on one connection of its own pool.
        node_client: Any = client.get_node_from_key(keys[0]).redis_connection  # type: ignore[no-untyped-call]
    else:
        route = getattr(client, "route", None)
        node_client = route(keys[0]) if route else client
    for attempt in range(2):
        pipe: Any = redis.Redis.pipeline(node_client, transaction=False)
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        reply, acked = pipe.execute(raise_on_error=False)
        if not isinstance(reply, NoScriptError) or attempt:
            break
        redis.Redis.script_load(node_client, script.script)
    if isinstance(reply, Exception):
        raise reply
    return reply, int(acked)


def run_on_masters(
    cluster: redis.RedisCluster, by_master: Sequence[tuple[Any, Sequence[ScriptCall]]]
) -> list[list[Any] | redis.RedisError]:
    """Run script calls on masters of ``cluster``, given as ``(node, calls)``: a
    hiredis-packed write on a pooled connection of each master's own client, every
    write sent before any reply is read.  Per master, the replies of its calls in
    order, an error reply as its exception (not raised); or, when its connection
    failed, that error (which of its calls ran is not known).

    Cheaper than redis-py's cluster pipeline, which asks the cluster for the keys of
    every call (``COMMAND GETKEYS``, a round trip each).  A script a master lost
    (``NOSCRIPT``) is loaded on that master and its calls run again; a call
    redirected or put off (``MOVED``, ``ASK``, ``TRYAGAIN``: it did not run) runs
    again alone through ``cluster``, which follows the redirection or waits, as
    redis-py's cluster pipeline does.
    """
    clients: list[Any] = [cluster.get_redis_connection(node) for node, _ in by_master]
    commands = [[_command(call) for call in calls] for _, calls in by_master]
    outcomes = pipelined_apart(list(zip(clients, commands, strict=True)))
    for (_, calls), client, sent, outcome in zip(
        by_master, clients, commands, outcomes, strict=True
    ):
        if isinstance(outcome, redis.RedisError):
            continue
        missing = [i for i, reply in enumerate(outcome) if isinstance(reply, NoScriptError)]
        if missing:
            try:
                for text in {calls[i][0].script for i in missing}:
                    redis.Redis.script_load(client, text)
                again = pipelined(client, [sent[i] for i in missing], False)
            except redis.RedisError as exc:
                again = [exc] * len(missing)
            for i, reply in zip(missing, again, strict=True):
                outcome[i] = reply
        for i, reply in enumerate(outcome):
            if isinstance(reply, (AskError, TryAgainError)):  # MovedError is an AskError
                outcome[i] = _redirected(cluster, calls[i], sent[i])
    return outcomes


def _redirected(cluster: Any, call: ScriptCall, command: tuple[Any, ...]) -> Any:
    """The reply of a call run alone through ``cluster`` (it follows ``MOVED`` and
    ``ASK``, and retries a ``TRYAGAIN``), or its error; a script the call's master
    lost is loaded there first."""
    try:
        try:
            return cluster.execute_command(*command)
        except NoScriptError:
            _load([call], cluster)
            return cluster.execute_command(*command)
    except (redis.RedisError, RedisClusterException) as exc:
        return exc


def _command(call: ScriptCall) -> tuple[Any, ...]:
    """The ``EVALSHA`` of a script call."""
    script, keys, args = call
    return ("EVALSHA", script.sha, len(keys), *keys, *args)


def _load(calls: Sequence[ScriptCall], client: Client) -> None:
    """Load the scripts of ``calls`` where they run: the server, or on a cluster the
    master of each call's first key (a cluster-wide SCRIPT LOAD would fail on any
    master that is down)."""
    if not isinstance(client, redis.RedisCluster):
        for text in {script.script for script, _, _ in calls}:
            client.script_load(text)
        return
    cluster: Any = client  # parts of redis-py's cluster client are untyped
    loads = {(script.script, cluster.get_node_from_key(keys[0]).name) for script, keys, _ in calls}
    for text, name in loads:
        cluster.execute_command("SCRIPT LOAD", text, target_nodes=cluster.get_node(node_name=name))


def _execute(client: Client, calls: Sequence[ScriptCall], transaction: bool) -> list[Any]:
    commands = [_command(call) for call in calls]
    if not is_cluster(client) and isinstance(client, redis.Redis):
        return pipelined(client, commands, transaction)
    # A cluster runs a transaction only within one slot: its calls run one by one.
    # (redis-py's cluster pipeline refuses its evalsha() method, yet routes an
    # EVALSHA by its first key like any other command.)
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return list(pipe.execute(raise_on_error=False))


_LOCK = threading.Lock()
_BY_CLIENT: weakref.WeakKeyDictionary[Client, dict[int, Scripts]] = weakref.WeakKeyDictionary()
_FLAGS: weakref.WeakKeyDictionary[Client, bool] = weakref.WeakKeyDictionary()


def _flags_of(client: Client) -> bool:
    """:func:`supports_script_flags`, asked once per client (a failed read is asked again
    by the client's next scripts)."""
    known = _FLAGS.get(client)
    if known is None:
        known = supports_script_flags(client)
        if known:
            _FLAGS[client] = known
    return known
