"""Loads ``lua/*.lua`` once per process and registers them per Redis client.

Each script is the generated key prelude and the constants it shares with
:mod:`lowkiq.storage.blob`, then the helpers of
``lua/_common.lua`` it uses, then the script's own file.  Redis runs the whole
text on every call, so a script carries only the key names and helper
definitions it refers to.  On Redis 7 and later the same scripts run as the
functions of one library (:mod:`lowkiq.storage.functions`), whose helpers are made
once per server: every call is then an ``FCALL``, else an ``EVALSHA``.  Every call is
made by :class:`LuaScript`, which also says whether a reply means the server lacks
the script or function (a restarted or flushed server, a new master) and loads it
there, so the call runs again.

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

import contextlib
import functools
import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    NoScriptError,
    OutOfMemoryError,
    RedisClusterException,
    TryAgainError,
)

from lowkiq.clients.connection import Client, is_cluster, pipelined, pipelined_apart
from lowkiq.storage import blob
from lowkiq.storage.functions import (
    CallMode,
    Library,
    again,
    again_packed,
    is_function_call,
    is_lost,
    load,
)
from lowkiq.storage.keys import SUFFIXES, lua_prelude

log = logging.getLogger(__name__)

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
#: Whether scripts run as Redis Functions where the servers are Redis 7 or later.
FUNCTIONS = True


#: A script's early lines (``-- early {`` to ``-- } early``): by ``EVALSHA`` they run
#: first, before the key table and the helpers are made (a script makes them on every
#: call), so they use no helper or constant of lowkiq's but ``TRACK`` (put before them):
#: only Lua's and Redis's own (``KEYS``, ``ARGV``, ``redis``, ``struct``...) and the
#: shard's keys as ``K.<name>`` (spelled out there); in an :data:`ALLOW_OOM` script they
#: write nothing (they run before its first write).  A pop of an idle shard ends in them,
#: and so does the push of one new job.
_EARLY = re.compile(r"^-- early \{\n(.*?)^-- \} early\n", re.MULTILINE | re.DOTALL)
#: A key of the script's own shard in its early lines.
_EARLY_KEY = re.compile(r"(?<![\w.])K\.(\w+)")

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
def _parts(name: str) -> tuple[str, str, frozenset[str]]:
    """``(own text, text of the helpers it uses, names they refer to)`` of one script."""
    own = (LUA_DIR / f"{name}.lua").read_text()
    blocks = _helpers()
    used: set[str] = set()
    referred = _names(own)
    while added := [b for b in blocks if b[0] not in used and b[0] in referred]:
        for block_name, _, names in added:
            used.add(block_name)
            referred |= names
    helpers = "".join(block_text for block_name, block_text, _ in blocks if block_name in used)
    return own, helpers, frozenset(referred)


@functools.cache
def source(name: str, track_length: int = 0, script_flags: bool = False) -> str:
    """The full Lua source of one script, as sent to Redis; with ``track_length``
    (``Worker.track``), the script records its job events in the shard's events stream
    capped at about that many entries (``TRACK``, false without tracking).  A script of
    :data:`ALLOW_OOM` runs on a full Redis: by its flags (``script_flags``: the server
    is Redis 7 or later), else by its first write (see the module)."""
    own, helpers, referred = _parts(name)
    constants = "".join(
        f"local {constant} = {getattr(blob, constant)}\n"
        for constant in blob.LUA_CONSTANTS
        if constant in referred
    )
    track = f"local TRACK = {track_length or 'false'}\n" if "TRACK" in referred else ""
    early, rest = _early(own)
    if "TRACK" in early:  # made before the early lines that name it (constants come after)
        early, track = track + early, ""
    constants += track
    text = f"{lua_prelude(helpers + own)}{constants}\n{helpers}\n-- {name}.lua\n{rest}"
    if name not in ALLOW_OOM:
        return early + text
    return FLAGS_SHEBANG + early + text if script_flags else early + FIRST_WRITE_6 + text


def _early(own: str) -> tuple[str, str]:
    """A script's early lines (see :data:`_EARLY`), its keys spelled out, and the rest of
    its text; ``""`` and the whole text when it has none."""
    match = _EARLY.search(own)
    if match is None:
        return "", own
    early = _EARLY_KEY.sub(lambda key: f'(KEYS[1] .. "{SUFFIXES[key.group(1)]}")', match[1])
    return early, own[: match.start()] + own[match.end() :]


def library(track_length: int = 0) -> Library:
    """The Functions library of every script (Redis 7 and later; see
    :mod:`lowkiq.storage.functions`), recording job events with ``track_length``."""
    return _library(track_length, tuple(getattr(blob, c) for c in blob.LUA_CONSTANTS))


def usable_library(track_length: int = 0) -> Library | None:
    """:func:`library`, or ``None`` (scripts by ``EVALSHA``) when functions are off or
    ``_common.lua`` has a top-level ``local`` the library cannot reset per call (logged)."""
    if not FUNCTIONS:
        return None
    try:
        return library(track_length)
    except ValueError as exc:
        log.warning("lowkiq's scripts run by EVALSHA, not as Redis Functions: %s", exc)
        return None


@functools.cache
def _library(track_length: int, constants: tuple[Any, ...]) -> Library:
    scripts = [(name, *_parts(name)[:2]) for name in SCRIPT_NAMES]
    common = (LUA_DIR / "_common.lua").read_text()
    return Library(scripts, common, track_length, ALLOW_OOM)


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


class LuaScript(Script):
    """One lowkiq script registered on a client: run by ``FCALL`` of its function while
    its set has a library (Redis 7 and later, see :mod:`lowkiq.storage.functions`), else
    by ``EVALSHA`` of its text.  Every call of a script is made of :meth:`command`; a
    reply :meth:`is_lost` means it did not run: :meth:`load`, then send :meth:`again`."""

    def __init__(self, client: Client, name: str, text: str, mode: CallMode) -> None:
        super().__init__(client, text)
        #: The script's text, as ``SCRIPT LOAD`` sends it.
        self.text = text
        #: The script's file name, without ``.lua``.
        self.name = name
        #: How its set calls scripts now (shared by the set).
        self.mode = mode
        #: Its function's name in the set's library (``None``: no library).
        self.function = mode.library.function(name) if mode.library is not None else None

    def command(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        """The command of one call: ``FCALL`` or ``EVALSHA``, keys, arguments."""
        if self.function is not None and self.mode.by_function():
            return ("FCALL", self.function, len(keys), *keys, *args)
        return self.evalsha(keys, args)

    def evalsha(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        """The ``EVALSHA`` of one call, whatever the mode (a redis-py cluster client
        routes it by its first key; an ``FCALL`` it would ask the server about)."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    @staticmethod
    def is_lost(reply: Any, command: tuple[Any, ...] | bytes) -> bool:
        """Whether the reply of a call (its ``command``, as a tuple or packed) says it did
        not run for want of this script or its function on that server (or the function
        refused there: a full Redis)."""
        if not isinstance(reply, redis.ResponseError):  # it ran: the common case, at once
            return False
        return is_lost(reply, is_function_call(command))

    def load(self, reply: Exception, execute: Callable[..., Any]) -> None:
        """Make a call lost with ``reply`` run where it was sent (``execute`` sends a
        command to that server): loads the library, or the script (see
        :func:`lowkiq.storage.functions.load`)."""
        load(self.mode, self.text, reply, execute)

    def again(self, command: tuple[Any, ...]) -> tuple[Any, ...]:
        """A lost call's :meth:`command` as it is sent again after :meth:`load`."""
        return again(self.mode, self.sha, command)

    def again_packed(self, packed: bytes) -> bytes:
        """:meth:`again` of the command packed in the Redis protocol."""
        if self.function is None:
            return packed
        return again_packed(self.mode, self.function, self.sha, packed)

    def __call__(
        self,
        keys: Sequence[Any] | None = None,
        args: Iterable[Any] | None = None,
        client: Any = None,
    ) -> Any:
        """Run the script: its :meth:`command` on ``client`` (else the one it was
        registered on), loaded and run again when lost.  Through redis-py's cluster
        client or a pipeline by ``EVALSHA``, as redis-py's ``Script`` does."""
        keys, args = list(keys or ()), list(args or ())
        if client is None:
            client = self.registered_client
        if isinstance(client, (redis.RedisCluster, redis.client.Pipeline)):
            return super().__call__(keys, args, client)
        command = self.command(keys, args)
        try:
            return client.execute_command(*command)
        except redis.ResponseError as exc:
            if not is_lost(exc, command[0] == "FCALL"):
                raise
            route = getattr(client, "route", None)
            server = route(keys[0]) if route is not None and keys else client
            self.load(exc, functools.partial(redis.Redis.execute_command, server))
            return client.execute_command(*self.again(command))


class Scripts:
    """The lowkiq scripts registered on one client, as attributes named after their files.

    On Redis 7 and later (every master of a Redis Cluster) they run as the functions of
    one library (:func:`library`), else by ``EVALSHA``."""

    def __init__(self, client: Client, track_length: int = 0) -> None:
        flags = _flags_of(client)
        #: How the set calls its scripts now.
        self.mode = CallMode(usable_library(track_length) if flags else None)
        for name in SCRIPT_NAMES:
            text = source(name, track_length, flags)
            setattr(self, name, LuaScript(client, name, text, self.mode))

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

    push: LuaScript
    group_check: LuaScript
    pop: LuaScript
    ack: LuaScript
    fail: LuaScript
    restore: LuaScript
    bury: LuaScript
    morgue_queue_up: LuaScript
    morgue_delete: LuaScript
    kill_failed: LuaScript
    delete_failed: LuaScript
    perform_now: LuaScript
    metrics: LuaScript
    range_after: LuaScript
    due_in: LuaScript
    lease_acquire: LuaScript
    lease_renew: LuaScript
    lease_renew_many: LuaScript
    lease_release: LuaScript
    lease_evict: LuaScript
    membership_beat: LuaScript
    membership_leave: LuaScript
    membership_command: LuaScript
    membership_list: LuaScript
    membership_snapshot: LuaScript
    membership_nudge: LuaScript
    membership_handoff: LuaScript
    assignment_publish: LuaScript
    history_add: LuaScript
    reshard_hold: LuaScript
    reshard_open: LuaScript
    reshard_take: LuaScript
    reshard_put: LuaScript
    reshard_drop: LuaScript
    reshard_counts: LuaScript
    layout_begin: LuaScript
    layout_lock: LuaScript
    rate_take: LuaScript
    schedule_tick: LuaScript
    group_claims: LuaScript
    group_delete: LuaScript
    group_waits_add: LuaScript
    jobs_cancel: LuaScript
    cancel_announce: LuaScript
    cancel_settle: LuaScript
    superseded: LuaScript
    workflow_open: LuaScript
    workflow_members: LuaScript
    workflow_close: LuaScript
    workflow_settle: LuaScript
    workflow_hold: LuaScript
    workflow_drop: LuaScript


#: One script call: the script, its keys, its arguments.
ScriptCall = tuple[LuaScript, Sequence[str], Sequence[Any]]


def run_pipelined(
    client: Client, calls: Sequence[ScriptCall], transaction: bool = False
) -> list[Any]:
    """Run script calls in one pipelined round trip; returns their replies in order.

    Each call is its script's :meth:`~LuaScript.command` (redis-py's pipelined
    ``Script`` would first ask ``SCRIPT EXISTS``, one more round trip).  The calls
    whose script or function Redis does not have (a restarted or flushed server) load
    it and run again in a second round trip; every other call has run once.  An error
    reply of any call is raised after all calls ran.  ``transaction``: all calls in one
    MULTI on a single server (on a Redis Cluster each call is atomic on its own).
    """
    commands, replies = _execute(client, calls, transaction)
    missing = [i for i, reply in enumerate(replies) if is_lost(reply, commands[i][0] == "FCALL")]
    if missing:
        _load([(calls[i], replies[i]) for i in missing], client)
        again = _run(client, [calls[i][0].again(commands[i]) for i in missing], transaction)
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
    command = script.command(keys, args)
    for attempt in range(2):
        pipe: Any = redis.Redis.pipeline(node_client, transaction=False)
        pipe.execute_command(*command)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        reply, acked = pipe.execute(raise_on_error=False)
        if attempt or not is_lost(reply, command[0] == "FCALL"):
            break
        script.load(reply, functools.partial(redis.Redis.execute_command, node_client))
        command = script.again(command)
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
    every call (``COMMAND GETKEYS``, a round trip each).  A script or function a
    master lacks (restarted, flushed, a replica that took over) is loaded on that
    master and its calls run again; a call redirected or put off (``MOVED``, ``ASK``,
    ``TRYAGAIN``: it did not run) runs again alone through ``cluster``, which follows
    the redirection or waits, as redis-py's cluster pipeline does.
    """
    clients: list[Any] = [cluster.get_redis_connection(node) for node, _ in by_master]
    commands = [[call[0].command(call[1], call[2]) for call in calls] for _, calls in by_master]
    outcomes = pipelined_apart(list(zip(clients, commands, strict=True)))
    for (_, calls), client, sent, outcome in zip(
        by_master, clients, commands, outcomes, strict=True
    ):
        if isinstance(outcome, redis.RedisError):
            continue
        missing = [i for i, reply in enumerate(outcome) if is_lost(reply, sent[i][0] == "FCALL")]
        if missing:
            execute = functools.partial(redis.Redis.execute_command, client)
            try:
                _load_on(execute, [(calls[i][0], outcome[i]) for i in missing])
                again = pipelined(client, [calls[i][0].again(sent[i]) for i in missing], False)
            except redis.RedisError as exc:
                again = [exc] * len(missing)
            for i, reply in zip(missing, again, strict=True):
                outcome[i] = reply
        for i, reply in enumerate(outcome):
            if isinstance(reply, (AskError, TryAgainError)):  # MovedError is an AskError
                outcome[i] = _redirected(cluster, calls[i])
    return outcomes


def _redirected(cluster: Any, call: ScriptCall) -> Any:
    """The reply of a call run alone through ``cluster`` (it follows ``MOVED`` and
    ``ASK``, and retries a ``TRYAGAIN``), or its error.  By ``EVALSHA``: redis-py routes
    it without asking a server.  A script the master it reached lacks (which may be
    the target of an ``ASK``, or a master that had only the functions) is loaded on
    every master that answers first."""
    script, keys, args = call
    command = script.evalsha(keys, args)
    try:
        try:
            return cluster.execute_command(*command)
        except NoScriptError:
            for node in cluster.get_primaries():
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    cluster.execute_command("SCRIPT LOAD", script.text, target_nodes=node)
            return cluster.execute_command(*command)
    except (redis.RedisError, RedisClusterException) as exc:
        return exc


def _load_on(execute: Callable[..., Any], lost: Sequence[tuple[LuaScript, Exception]]) -> None:
    """Load on one server (``execute`` sends it a command) what the lost calls, each with
    its reply, lacked: a set's library once, or each script's text once."""
    libraries: set[int] = set()
    texts: set[str] = set()
    for script, reply in lost:
        mode = script.mode
        if id(mode) in libraries and mode.by_function():
            continue
        if script.function is None or not mode.by_function() or isinstance(reply, NoScriptError):
            if script.text not in texts:
                texts.add(script.text)
                execute("SCRIPT LOAD", script.text)
            continue
        script.load(reply, execute)  # the library, or the switch to EVALSHA and the text
        if mode.by_function():
            libraries.add(id(mode))
        else:
            texts.add(script.text)


def _load(lost: Sequence[tuple[ScriptCall, Exception]], client: Client) -> None:
    """Load what the lost calls (each with its reply) lacked where they run: the server,
    or on a cluster the master of each call's first key (a cluster-wide load would fail
    on any master that is down)."""
    route = getattr(client, "route", None)  # a processing thread's cluster client
    if isinstance(client, redis.RedisCluster):
        cluster: Any = client  # parts of redis-py's cluster client are untyped
        servers = {
            name: functools.partial(
                cluster.execute_command, target_nodes=cluster.get_node(node_name=name)
            )
            for name in {cluster.get_node_from_key(keys[0]).name for (_, keys, _), _ in lost}
        }
        by_server = [
            (cluster.get_node_from_key(call[1][0]).name, call, reply) for call, reply in lost
        ]
    elif route is not None:
        servers = {}
        by_server = []
        for call, reply in lost:
            server = route(call[1][0])
            servers[id(server)] = functools.partial(redis.Redis.execute_command, server)
            by_server.append((id(server), call, reply))
    else:
        _load_on(client.execute_command, [(call[0], reply) for call, reply in lost])
        return
    for key, execute in servers.items():
        _load_on(execute, [(call[0], reply) for at, call, reply in by_server if at == key])


def _execute(
    client: Client, calls: Sequence[ScriptCall], transaction: bool
) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """The commands of ``calls`` and their replies.  Through redis-py's cluster pipeline
    by ``EVALSHA``, which it routes by the first key (an ``FCALL`` it would ask the
    server about)."""
    if isinstance(client, redis.RedisCluster):
        commands = [script.evalsha(keys, args) for script, keys, args in calls]
    else:
        commands = [script.command(keys, args) for script, keys, args in calls]
    try:
        return commands, _run(client, commands, transaction)
    except OutOfMemoryError:
        if not transaction or not any(command[0] == "FCALL" for command in commands):
            raise
    # A full Redis refused a function without allow-oom as the MULTI was queued: nothing
    # ran.  The calls go by EVALSHA, whose scripts Redis refuses only at a growing write.
    for script, _, _ in calls:
        script.mode.refused()
    commands = [script.command(keys, args) for script, keys, args in calls]
    return commands, _run(client, commands, transaction)


def _run(client: Client, commands: Sequence[tuple[Any, ...]], transaction: bool) -> list[Any]:
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
