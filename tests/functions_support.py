"""What the tests of lowkiq's Redis Functions share: a ``redis-server`` binary of each
version, and what a server ran."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import redis

from lowkiq.clients.embedded import redis_server_binary


def _major(binary: str) -> int:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    return int(out.split("v=", 1)[1].split(".", 1)[0])


def binary_of(major_at_least: int, below: int = 100) -> str | None:
    """A redis-server binary whose major version is in ``[major_at_least, below)``: the
    one on PATH, the packaged one, ``LOWKIQ_TEST_REDIS_7`` (``.ci/run`` links Debian's
    there), or Debian's."""
    candidates = [redis_server_binary(prefer_path=True), redis_server_binary()]
    candidates += [os.environ.get("LOWKIQ_TEST_REDIS_7", ""), "/usr/bin/redis-server"]
    for binary in candidates:
        if binary and Path(binary).exists() and major_at_least <= _major(binary) < below:
            return binary
    return None


#: A Redis 7 (or later) binary, or None.
REDIS_7 = binary_of(7)
#: A Redis 6 binary, or None.
REDIS_6 = binary_of(6, 7)


def required(binary: str | None, what: str) -> str:
    """``binary``; when there is none the test is skipped, but under ``CI=true`` it fails
    (``.ci/run`` gives them Debian's Redis 7 beside the packaged 6.2)."""
    if binary is None:
        message = f"no {what} redis-server here (Debian's package redis-server has one)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return binary


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (e.g. ``fcall``, ``function|load``)."""
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def lowkiq_libraries(client: redis.Redis) -> list[str]:
    """The names of the lowkiq libraries the server holds."""
    libraries = client.function_list()
    names = [dict(zip(lib[::2], lib[1::2], strict=True))[b"library_name"] for lib in libraries]
    return [name.decode() for name in names if name.startswith(b"lowkiq_")]
