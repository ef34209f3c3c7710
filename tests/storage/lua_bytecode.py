"""The global names a Lua 5.1 chunk reads or writes, from the bytecode Redis's own Lua
compiler makes of it (``string.dump(loadstring(source))`` inside Redis).

A script calling a helper whose name it misspells compiles fine: the name is then
a global, which Redis refuses only when that line runs.  The bytecode says which
globals a chunk touches (``GETGLOBAL``, ``SETGLOBAL``), whichever path runs.
"""

from __future__ import annotations

import struct
from typing import Any

GETGLOBAL, SETGLOBAL = 5, 7
_DUMP = "return string.dump(assert(loadstring(ARGV[1], ARGV[2])))"


class _Reader:
    """Reads a Lua 5.1 dump (the layout of lundump.c) made on this platform."""

    def __init__(self, data: bytes) -> None:
        if data[:5] != b"\x1bLuaQ":
            raise ValueError("not a Lua 5.1 chunk")
        endian = "<" if data[6] == 1 else ">"
        int_size, size_t_size, instruction_size, number_size = data[7:11]
        self.int = endian + {4: "i", 8: "q"}[int_size]
        self.size_t = endian + {4: "I", 8: "Q"}[size_t_size]
        self.instruction = endian + {4: "I"}[instruction_size]
        self.number_size = number_size
        self.data, self.pos = data, 12

    def _unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def _byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def _string(self) -> bytes:
        size = self._unpack(self.size_t)
        self.pos += size
        return self.data[self.pos - size : self.pos - 1] if size else b""

    def function(self, names: set[str]) -> None:
        """Read one function (and its nested ones), adding the globals it touches."""
        self._string()  # source
        self._unpack(self.int), self._unpack(self.int)  # line defined, last line
        self.pos += 4  # upvalues, parameters, vararg flag, max stack size
        code = [self._unpack(self.instruction) for _ in range(self._unpack(self.int))]
        constants: list[Any] = []
        for _ in range(self._unpack(self.int)):
            kind = self._byte()
            if kind == 1:
                constants.append(self._byte())
            elif kind == 3:
                self.pos += self.number_size
                constants.append(None)
            elif kind == 4:
                # (any bytes: a string constant need not be UTF-8)
                constants.append(self._string().decode("utf-8", "surrogateescape"))
            else:
                constants.append(None)
        for instruction in code:
            if instruction & 0x3F in (GETGLOBAL, SETGLOBAL):
                names.add(constants[instruction >> 14])
        for _ in range(self._unpack(self.int)):
            self.function(names)
        lines = self._unpack(self.int)
        self.pos += lines * struct.calcsize(self.int)  # line info
        for _ in range(self._unpack(self.int)):  # local names
            self._string()
            self.pos += 2 * struct.calcsize(self.int)
        for _ in range(self._unpack(self.int)):  # upvalue names
            self._string()


def globals_of(client: Any, source: str, name: str = "=script") -> set[str]:
    """The global names ``source`` touches, compiled by the Lua of ``client``'s Redis
    (a syntax error is raised as Redis's error)."""
    names: set[str] = set()
    _Reader(client.eval(_DUMP, 0, source, name)).function(names)
    return names
