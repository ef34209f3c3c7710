"""lowkiq's scripts as one Redis Functions library (Redis 7 and later).

A script sent by ``EVALSHA`` runs its whole text on every call: the key table ``K``,
then every helper of ``lua/_common.lua`` it uses, made again as closures each time
(about 40 k of Redis's instructions before the script's first command).  A library
(``FUNCTION LOAD``) registers each script as a function (``FCALL``); the helpers,
constants and the scripts' bodies are made once, by the library's first call (Redis
7.0 runs a library's top level without Lua's ``string``, ``math``... which constants
may call).  A body is the script's own file, after two lines that set the per-call
state: ``P`` and ``K`` (built, as for ``EVALSHA``, with only the key names that
function and its helpers use, and kept for the shard's next calls: up to
:data:`KEYS_CACHED` shards per function), and the helpers' per-call caches (the
top-level ``local`` of ``_common.lua`` whose name is not a CONSTANT) back to their
first value.

One library per script set: its name and its functions' names carry a hash of its
text, so two lowkiq versions (or two ``Worker.track`` lengths, whose ``TRACK``
constant differs) share a server without clashing.  The functions of
:data:`~lowkiq.storage.scripts.ALLOW_OOM` carry the ``allow-oom`` flag; every function
``allow-cross-slot-keys``, which a script without flags may do.

A function without ``allow-oom`` is refused whole on a full Redis (an ``OOM`` reply
before it runs, or a ``MULTI`` holding it aborted), where the same script by ``EVALSHA``
(no flags) is refused only at its first write that may grow memory (a read-only call
still answers): such a refusal, like a ``FUNCTION LOAD`` refused (a full Redis), makes
the set run its calls by ``EVALSHA`` for :data:`EVALSHA_SECONDS`, and the call runs
again so.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import NoScriptError, OutOfMemoryError, ResponseError

from lowkiq.storage import blob
from lowkiq.storage.keys import lua_keys_at

log = logging.getLogger(__name__)

#: Seconds a script set calls its scripts by ``EVALSHA`` after a server refused one of
#: its functions or its library (a full Redis), before it tries ``FCALL`` again.
EVALSHA_SECONDS = 5.0

#: Key tables each function keeps, by shard prefix, for the calls that follow (a key
#: table is the same strings on every call of a shard); past that many it starts over.
KEYS_CACHED = 128

#: Every library's name starts with this (then a hash of its text).
LIBRARY_PREFIX = "lowkiq_"

#: The reply of ``FCALL`` on a server without the function.
NOT_FOUND = "Function not found"
#: How Redis 6 answers ``FCALL``.
UNKNOWN_COMMAND = "unknown command"

#: A top-level ``local`` of ``_common.lua`` that is not a function.
_TOP_LOCAL = re.compile(r"^local (?!function )(.*)$", re.MULTILINE)
#: One name and its value, on one line (then maybe a comment).
_ONE_LOCAL = re.compile(r"(\w+) = (.+?)\s*(?:--[^']*)?")


def per_call_state(common: str) -> dict[str, str]:
    """The helpers' per-call caches: each top-level ``local`` of ``common`` that is not a
    function nor a CONSTANT (all capitals), with its first value (set again on every
    call, as a script by ``EVALSHA`` makes it).  Raises ``ValueError`` for a top-level
    ``local`` not of the form ``name = value`` on one line."""
    state = {}
    for declaration in _TOP_LOCAL.findall(common):
        match = _ONE_LOCAL.fullmatch(declaration.strip())
        value = match.group(2) if match else ""
        balanced = all(value.count(a) == value.count(b) for a, b in ("{}", "()", "[]"))
        if match is None or not balanced:
            raise ValueError(f"_common.lua: a top-level local not on one line: {declaration!r}")
        if not match.group(1).isupper():
            state[match.group(1)] = value
    return state


class Library:
    """One Functions library: the scripts of a set, registered once per server."""

    def __init__(
        self,
        scripts: Sequence[tuple[str, str, str]],
        common: str,
        track_length: int,
        allow_oom: frozenset[str],
    ) -> None:
        """``scripts``: ``(name, own text, text of the helpers it uses)`` of each."""
        constants = "".join(
            f"local {constant} = {getattr(blob, constant)}\n" for constant in blob.LUA_CONSTANTS
        )
        constants += f"local TRACK = {track_length or 'false'}\n"
        state = per_call_state(common)
        # Redis 7.0 runs a library's top level without Lua's libraries (string, math...):
        # the helpers, whose constants may call them, are made by the first call.
        made = ["local made = nil\nlocal function make()\n", constants, "local P, K\n"]
        made += [common, "\nlocal bodies = {}\n"]
        registered = []
        for name, own, helpers in scripts:
            used = helpers + own
            resets = [(n, v) for n, v in state.items() if re.search(rf"(?<![\w.]){n}\b", used)]
            reset = ""
            if resets:
                names = ", ".join(n for n, _ in resets)
                reset = f"{names} = {', '.join(v for _, v in resets)}\n"
            made.append(
                f"-- {name}.lua\ndo\n{lua_keys_at(used)}local cached, cached_count = {{}}, 0\n"
                f"bodies.{name} = function(KEYS, ARGV)\n"
                "P = KEYS[1]\nK = cached[P]\nif not K then\n  K = keys_at(P)\n"
                f"  if cached_count >= {KEYS_CACHED} then cached, cached_count = {{}}, 0 end\n"
                "  cached[P] = K\n  cached_count = cached_count + 1\nend\n"
                f"{reset}{own}\nend\nend\n"
            )
            flags = "'allow-cross-slot-keys'"
            if name in allow_oom:
                flags = "'allow-oom', " + flags
            registered.append(
                f"redis.register_function{{function_name = '@_{name}', flags = {{{flags}}},"
                f" callback = function(KEYS, ARGV)\n"
                f"  if not made then made = make() end\n  return made.{name}(KEYS, ARGV)\nend}}\n"
            )
        made.append("return bodies\nend\n")
        text = "".join(made + registered)
        digest = hashlib.sha1(text.encode()).hexdigest()[:20]
        #: The library's name (``lowkiq_`` and a hash of its text).
        self.name = f"{LIBRARY_PREFIX}{digest}"
        #: What ``FUNCTION LOAD`` is sent.
        self.text = f"#!lua name={self.name}\n" + text.replace("'@_", f"'{self.name}_")

    def function(self, script: str) -> str:
        """The name of the function of ``script`` in this library."""
        return f"{self.name}_{script}"


class CallMode:
    """How one script set calls its scripts now: its library's functions (``FCALL``), or,
    without a library or while servers refuse it, ``EVALSHA``."""

    def __init__(self, library: Library | None) -> None:
        self.library = library
        # time.monotonic() until which the calls go by EVALSHA.
        self._evalsha_until = 0.0

    def by_function(self) -> bool:
        """Whether calls go by ``FCALL`` now."""
        return self.library is not None and time.monotonic() >= self._evalsha_until

    def refused(self, seconds: float | None = None) -> None:
        """A server refused the library or a function: ``EVALSHA`` for ``seconds``
        (:data:`EVALSHA_SECONDS` by default)."""
        self._evalsha_until = time.monotonic() + (EVALSHA_SECONDS if seconds is None else seconds)


def is_function_call(command: tuple[Any, ...] | bytes) -> bool:
    """Whether ``command`` (as a tuple, or packed in the Redis protocol) is an ``FCALL``."""
    if isinstance(command, bytes):
        start = command.find(b"\r\n") + 2
        return command[start : start + 11] == b"$5\r\nFCALL\r\n"
    return bool(command) and command[0] == "FCALL"


def is_lost(reply: Any, by_function: bool) -> bool:
    """Whether ``reply`` (a script call's; ``by_function``: by ``FCALL``, else
    ``EVALSHA``) says the call did not run because the server lacks the script or the
    function, refuses the function (a full Redis: see the module), or has no functions:
    load what it lacks (:func:`load`) and run the call again."""
    if isinstance(reply, NoScriptError):
        return True
    if not by_function or not isinstance(reply, ResponseError):
        return False
    if isinstance(reply, OutOfMemoryError):  # refused before it ran (allow-oom's never is)
        return True
    text = str(reply)
    return text.startswith((NOT_FOUND, UNKNOWN_COMMAND))


def library_to_load(mode: CallMode, reply: Exception) -> str | None:
    """After a lost call's ``reply`` (:func:`is_lost`): the text of the library to
    ``FUNCTION LOAD`` on that server (then the call runs again), or ``None``: the set
    now calls by ``EVALSHA`` there (it has no library, the server refused the function,
    or has no functions: Redis 6), so the script's text is to be loaded instead."""
    library = mode.library
    if library is None or isinstance(reply, NoScriptError):
        return None
    text = str(reply)
    if text.startswith(NOT_FOUND):
        return library.text
    mode.refused(float("inf") if text.startswith(UNKNOWN_COMMAND) else EVALSHA_SECONDS)
    return None


def library_refused(mode: CallMode, error: ResponseError) -> bool:
    """Whether ``FUNCTION LOAD``'s ``error`` means the server refused the library (a full
    Redis): the set then calls by ``EVALSHA`` for a while.  ``False``: it is loaded
    (another process loaded it first)."""
    if "already exists" in str(error):
        return False
    if not isinstance(error, OutOfMemoryError):
        log.warning("Redis refused lowkiq's functions (%s): scripts run by EVALSHA", error)
    mode.refused()
    return True


def load(mode: CallMode, script_text: str, reply: Exception, execute: Callable[..., Any]) -> None:
    """After a lost call's ``reply`` (:func:`is_lost`), make the call run on that server
    (``execute`` sends a command there): ``FUNCTION LOAD`` the library, or, when the
    server refuses it (full) or refused the function, or has no functions (Redis 6),
    switch the set to ``EVALSHA`` (:meth:`CallMode.refused`) and ``SCRIPT LOAD`` the
    script's text."""
    library = library_to_load(mode, reply)
    if library is not None:
        try:
            execute("FUNCTION LOAD", library)
            return
        except ResponseError as exc:
            if not library_refused(mode, exc):
                return
    execute("SCRIPT LOAD", script_text)


def again(mode: CallMode, sha: str, command: tuple[Any, ...]) -> tuple[Any, ...]:
    """``command`` (a script call's ``FCALL`` or ``EVALSHA``) as it runs after a
    :func:`load`: an ``EVALSHA`` of ``sha`` when the set switched to it."""
    if command[0] == "FCALL" and not mode.by_function():
        return ("EVALSHA", sha, *command[2:])
    return command


@functools.cache
def _packed_head(name: str) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(name), name.encode())


def again_packed(mode: CallMode, function: str, sha: str, packed: bytes) -> bytes:
    """:func:`again` of a command packed in the Redis protocol."""
    if mode.by_function():
        return packed
    head = b"$5\r\nFCALL\r\n" + _packed_head(function)
    start = packed.index(b"\r\n") + 2  # after the array's length
    if packed[start : start + len(head)] != head:
        return packed
    return packed[:start] + b"$7\r\nEVALSHA\r\n" + _packed_head(sha) + packed[start + len(head) :]
