"""A wake-up for a thread that sleeps until something happens: a self-pipe.

The worker process's main thread sleeps in :meth:`Wakeup.wait` until a signal
handler, a thread that ends or a stop request calls :meth:`Wakeup.set`, instead of
looking at its flags many times a second (each look is a wake-up of an idle process,
which costs CPU).  A pipe rather than a :class:`threading.Event`: ``set`` is one
``os.write``, which takes no lock, so a signal handler may call it while the main
thread is anywhere, even inside ``wait`` (Python runs the handler, then the
interrupted ``poll`` finds the byte).
"""

from __future__ import annotations

import contextlib
import os
import select
import weakref


def _close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class Wakeup:
    """A pipe whose read end :meth:`wait` blocks on and whose write end :meth:`set` writes."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        # poll, not select: a process with many sockets may number its fds past 1024.
        self._poll = select.poll()
        self._poll.register(self._read, select.POLLIN)
        # A Wakeup dropped without close() (a server built and never stopped) closes its
        # pipe when it is collected.
        self._closer = weakref.finalize(self, _close, self._read, self._write)

    def set(self) -> None:
        """Wake the thread in :meth:`wait` (or its next call); from any thread or a signal
        handler."""
        if self._write < 0:
            return  # closed: its number may be another file's now
        # A full pipe is a wake-up already pending.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"\0")

    def wait(self, timeout: float) -> bool:
        """Sleep until :meth:`set` (since the last wait) or ``timeout`` seconds; ``True``
        when woken.  Wake-ups are consumed: the caller looks at what it waits for after
        each return."""
        if not self._poll.poll(timeout * 1000):
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 512):
                pass
        return True

    def close(self) -> None:
        """Close both ends; :meth:`set` does nothing afterwards."""
        self._read = self._write = -1
        self._closer()
