"""Loads ``lua/*.lua`` once per process and registers them per Redis client.

Each script is the generated key prelude, then ``lua/_common.lua``, then the
script's own file.  redis-py's ``Script`` runs ``EVALSHA`` and loads the script
on ``NOSCRIPT``, so a restarted Redis needs nothing special.
"""

from __future__ import annotations

import functools
import threading
import weakref
from pathlib import Path

import redis
from redis.commands.core import Script

from lowkiq.storage.keys import lua_prelude

LUA_DIR = Path(__file__).with_name("lua")

SCRIPT_NAMES = (
    "push",
    "pop",
    "ack",
    "fail",
    "restore",
    "morgue_queue_up",
    "morgue_delete",
    "kill_failed",
    "delete_failed",
    "perform_now",
    "metrics",
    "range_after",
)


@functools.cache
def source(name: str) -> str:
    """The full Lua source of one script, as sent to Redis."""
    common = (LUA_DIR / "_common.lua").read_text()
    own = (LUA_DIR / f"{name}.lua").read_text()
    return f"{lua_prelude()}\n{common}\n-- {name}.lua\n{own}"


class Scripts:
    """The lowkiq scripts registered on one client, as attributes named after their files."""

    def __init__(self, client: redis.Redis) -> None:
        for name in SCRIPT_NAMES:
            setattr(self, name, client.register_script(source(name)))

    @classmethod
    def for_client(cls, client: redis.Redis) -> Scripts:
        """The scripts registered on ``client``, made once per client."""
        with _LOCK:
            scripts = _BY_CLIENT.get(client)
            if scripts is None:
                scripts = _BY_CLIENT[client] = cls(client)
            return scripts

    push: Script
    pop: Script
    ack: Script
    fail: Script
    restore: Script
    morgue_queue_up: Script
    morgue_delete: Script
    kill_failed: Script
    delete_failed: Script
    perform_now: Script
    metrics: Script
    range_after: Script


_LOCK = threading.Lock()
_BY_CLIENT: weakref.WeakKeyDictionary[redis.Redis, Scripts] = weakref.WeakKeyDictionary()
