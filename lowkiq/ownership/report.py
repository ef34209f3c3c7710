"""What a process tells the others and the dashboard about itself, and when.

The info (host, pid, threads, memory, busy batches, shards held, ...) rides on
a beat only when it changed, memory aside, or every :data:`INFO_REFRESH`
seconds: most beats carry nothing but "alive".
"""

from __future__ import annotations

import os
import resource
import socket
import time
from collections.abc import Iterable

from lowkiq.version import __version__

#: Seconds between two sendings of a process's info when nothing in it changed.
INFO_REFRESH = 5.0


def rss_bytes() -> int:
    """The process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class InfoReport:
    """One process's info: the parts that never change, and when it was last sent."""

    def __init__(self, threads: int, queues: Iterable[str], static: bool) -> None:
        #: What never changes while the process runs.
        self.static: dict[str, object] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "threads": threads,
            "queues": sorted(queues),
            "version": __version__,
            "started_at": time.time(),
            "mode": "static" if static else "automatic",
        }
        self._sent: tuple[float, dict[str, object]] | None = None

    def due(self, info: dict[str, object]) -> dict[str, object] | None:
        """``info`` when it must be sent now (it changed, memory aside, or is getting
        old), else ``None``."""
        steady = {key: value for key, value in info.items() if key != "rss"}
        now = time.monotonic()
        if self._sent is not None:
            sent_at, sent = self._sent
            if sent == steady and now - sent_at < INFO_REFRESH:
                return None
        self._sent = (now, steady)
        return info
