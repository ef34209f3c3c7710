"""Where a pop's time in Lua goes, line by line: callgrind (``bench/redis_instructions.py``)
counts Redis's instructions by C function, and the Lua interpreter is one of them; this
counts the Lua virtual machine's instructions and the C functions a script calls
(``string.sub``, ``tonumber``, ``redis.call``...) per line of the script.

The pop script's text, as ``EVALSHA`` sends it (key table, helpers, then ``pop.lua``),
runs in Lua 5.1 outside Redis (lupa: ``pip install lupa``), with a count hook on every
VM instruction; each ``redis.call`` is sent to a private Redis (the embedded binary)
holding a queue of ``--jobs`` jobs in one shard (``--groups``: job i in group
``g{i % groups}``), and its reply given back as Redis's Lua gets it.  The script's
``struct`` is Python's ``struct`` for the formats lowkiq's scripts use.  A pop takes up
to ``--batches`` batches of one job and acks the pop before it (``--warm`` pops come
first, uncounted), as a processing thread does.

Redis runs the same bytecode, so the counts are what its interpreter does; what a VM
instruction or a C call costs there is callgrind's to say (on Redis 7.0, some 50 of
Redis's instructions a VM instruction, a few hundred a call of a Lua function).  Lines
of the key table and the helpers' definitions run once per call by ``EVALSHA`` only; by
``FCALL`` they run once per server.

Usage: python bench/lua_lines.py [--jobs 1000] [--batches 32] [--groups 0] [--warm 2]
       [--top 40]
"""

from __future__ import annotations

import argparse
import struct
import tempfile
from typing import Any

import redis
from _machine import machine

from lowkiq.clients.embedded import start_server
from lowkiq.clients.thread import ThreadClient
from lowkiq.ownership import leases
from lowkiq.storage import scripts
from lowkiq.storage.queue import Queue

try:
    import lupa.lua51 as lupa
except ImportError:  # pragma: no cover - a bench's own requirement
    raise SystemExit("bench/lua_lines.py needs lupa: pip install lupa") from None

#: The chunk name the counted script runs under (its lines are counted, no other).
CHUNK = "=script"

#: The Lua side: Redis's ``redis`` and ``struct`` tables over Python functions, the count
#: hook, and ``run(source, KEYS, ARGV)``.
HARNESS = """
function install(call, pack, unpack)
  redis = {
    call = function(...)
      local reply = call(...)
      if type(reply) == 'table' and reply.err then error(reply.err) end
      return reply
    end,
    pcall = function(...) return call(...) end,
    error_reply = function(message) return {err = message} end,
    status_reply = function(message) return {ok = message} end,
  }
  struct = {pack = pack, unpack = unpack}
end
function hook(event)
  local info = debug.getinfo(2, 'Sl')
  if event == 'count' then
    if info.source == '@CHUNK@' then
      counts[info.currentline] = (counts[info.currentline] or 0) + 1
    end
  elseif info.what == 'C' then
    local caller = debug.getinfo(3, 'Sl')
    if caller and caller.source == '@CHUNK@' then
      calls[caller.currentline] = (calls[caller.currentline] or 0) + 1
    end
  end
end
function run(source, keys, argv)
  counts, calls = {}, {}
  KEYS, ARGV = keys, argv
  local chunk = assert(loadstring(source, '@CHUNK@'))
  debug.sethook(hook, 'c', 1)
  local reply = chunk()
  debug.sethook()
  return reply
end
""".replace("@CHUNK@", CHUNK)


class CapturingClient(ThreadClient):
    """A processing thread's client that keeps the keys and arguments of the script calls
    it packs (the pop's, as the dispatcher would send them)."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.captured: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None

    def pack_script(self, script: Any, keys: tuple[Any, ...], args: tuple[Any, ...]) -> bytes:
        """Keep ``keys`` and ``args``; pack as usual."""
        self.captured = (keys, args)
        return super().pack_script(script, keys, args)


class LuaRedis:
    """Lua 5.1 whose ``redis.call`` runs on ``connection`` (RESP2, as scripts see)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.lua = lupa.LuaRuntime(encoding=None, unpack_returned_tuples=True)
        self.lua.execute(HARNESS)
        self.lua.globals().install(self.call, self.pack, self.unpack)

    def call(self, *args: Any) -> Any:
        """A command from the script; its reply as Redis's Lua converts it."""
        self.connection.send_command(*[_argument(a) for a in args])
        try:
            reply = self.connection.read_response()
        except redis.ResponseError as exc:
            return self.lua.table_from({b"err": str(exc).encode()})
        if reply == b"OK":
            return self.lua.table_from({b"ok": b"OK"})
        return self._to_lua(reply)

    def _to_lua(self, reply: Any) -> Any:
        if isinstance(reply, list):
            return self.lua.table_from([self._to_lua(item) for item in reply])
        return False if reply is None else reply

    @staticmethod
    def pack(layout: bytes, *values: Any) -> bytes:
        """``struct.pack`` of Redis's Lua, for the layouts lowkiq uses."""
        return struct.pack(_layout(layout), *values)

    @staticmethod
    def unpack(layout: bytes, data: bytes, position: int = 1) -> tuple[Any, ...]:
        """``struct.unpack``: the values, then the position after them."""
        fmt = _layout(layout)
        return (*struct.unpack_from(fmt, data, position - 1), position + struct.calcsize(fmt))

    def run(self, source: str, keys: list[bytes], args: list[bytes]) -> tuple[Any, dict, dict]:
        """Run ``source`` once: its reply, and per line its VM instructions and C calls."""
        run = self.lua.globals().run
        reply = run(source.encode(), self.lua.table_from(keys), self.lua.table_from(args))
        counts = dict(self.lua.globals().counts.items())
        calls = dict(self.lua.globals().calls.items())
        return reply, counts, calls


def _argument(value: Any) -> bytes:
    """A ``redis.call`` argument as Redis's Lua sends it (numbers by ``%.17g``)."""
    if isinstance(value, float):
        return b"%d" % value if value.is_integer() else b"%.17g" % value
    if isinstance(value, int):
        return b"%d" % value
    return value


def _layout(layout: bytes) -> str:
    """A layout of Lua's ``struct`` in Python's: ``i4`` / ``I4`` / ``I2`` spelled so."""
    return layout.decode().replace("i4", "i").replace("I4", "I").replace("I2", "H")


def _encoded(values: tuple[Any, ...]) -> list[bytes]:
    return [v.encode() if isinstance(v, str) else _argument(v) for v in values]


def main() -> None:
    """Fill a shard, pop it ``--warm`` times, count the next pop, print its lines."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=32, help="batches of one job a pop")
    parser.add_argument("--groups", type=int, default=0, help="groups in the shard (0: none)")
    parser.add_argument("--warm", type=int, default=2, help="pops before the counted one")
    parser.add_argument("--top", type=int, default=40, help="lines printed")
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-lua-lines-"))
    try:
        # RESP2, as scripts see replies (redis-py may speak RESP3).
        client = redis.Redis.from_url(server.url, protocol=2)
        queue = Queue(client, "Lines", 1)
        queue.push(
            (str(i), b'{"id": %d}' % i, None, None, f"g{i % args.groups}" if args.groups else None)
            for i in range(args.jobs)
        )
        lease, _, _ = leases.acquire(queue, 0, "lines", 3600.0)
        assert lease is not None
        capturing = CapturingClient(client)
        popper = Queue(capturing, "Lines", 1)
        lua = LuaRedis(client.connection_pool.get_connection())
        source = scripts.source("pop")
        batch = 0
        for _ in range(args.warm + 1):
            popper.pop_command(0, lease.token, 1, 0 if batch else None, lease.token, None,
                               args.batches, None, batch)  # fmt: skip
            assert capturing.captured is not None
            keys, call_args = capturing.captured
            reply, counts, calls = lua.run(source, _encoded(keys), _encoded(call_args))
            replied = list(reply.values())
            batch = int(replied[3]) if replied[3] > 0 else batch
        pairs_ = [item for item in replied[4:] if isinstance(item, bytes)]  # not the groups
        taken = len(pairs_) // 2
        print(machine(), f"| pop of {taken} jobs ({args.jobs} queued, {args.groups} groups)")
        print(f"VM instructions: {sum(counts.values()):,}; C calls: {sum(calls.values()):,}")
        print("    VM  calls   line")
        lines = source.split("\n")
        for line, count in sorted(counts.items(), key=lambda item: -item[1])[: args.top]:
            print(f"{count:6d} {calls.get(line, 0):6d} {line:6d}: {lines[line - 1].strip()[:100]}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
