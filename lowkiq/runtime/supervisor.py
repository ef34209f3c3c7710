"""``lowkiq worker --processes N``: fork N worker processes, restart the ones that die.

One process is one core (the GIL), so a host runs several.  The supervisor
loads the app once, then forks; each child makes its own Redis connections
(the settings' client is made lazily per process), joins the membership and
serves its share of the shards like any other process.  A child that exits
while the supervisor is not stopping is restarted after a backoff that
doubles while it keeps dying young.  TERM, INT and TTIN are forwarded to
every child; the supervisor exits when they all have, 0 when all exited 0.

The supervisor names each child's membership id before it forks it, so when a
child dies (a crash, an OOM kill, a job that ends the process) it frees the
child's leases and deregisters it at once (``on_death``, see
:mod:`lowkiq.ownership.eviction`): its shards are served again within a second,
not after ``lease_ttl``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lowkiq.clients.retry import Backoff
from lowkiq.ownership.membership import PROCESS_ID_ENV, new_process_id
from lowkiq.runtime.wakeup import Wakeup

log = logging.getLogger("lowkiq.supervisor")

#: Longest sleep, seconds, of the supervisor: signals and children that exit (SIGCHLD)
#: wake it at once (lowkiq.runtime.wakeup), a child's restart when it is due.
IDLE = 1.0
#: First and longest wait, seconds, before restarting a child that died.
RESTART_BACKOFF = 0.5
RESTART_BACKOFF_CAP = 30.0
#: The waits before a child that keeps dying is started again (the retry policy).
RESTARTS = Backoff(RESTART_BACKOFF, RESTART_BACKOFF_CAP)
#: A child that ran this many seconds resets its slot's backoff.
HEALTHY_AFTER = 60.0
# prctl(2) option: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


@dataclass
class Slot:
    """One of the N child processes: its pid, and how it has been dying."""

    number: int
    pid: int | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float = 0.0
    exit_codes: list[int] = field(default_factory=list)
    #: The membership id of the child now running in this slot.
    process_id: str = ""


def stop_with_parent() -> None:
    """Ask Linux to send this (child) process TERM when the supervisor dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def exit_code(status: int) -> int:
    """A child's exit code from ``os.waitpid``'s status (128 + signal when killed)."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class Supervisor:
    """Runs ``processes`` children, each calling ``run_child(number)`` (0 to ``processes`` - 1,
    kept by a restarted child) and exiting with its result."""

    def __init__(
        self,
        processes: int,
        run_child: Callable[[int], int],
        on_death: Callable[[str], None] | None = None,
    ) -> None:
        self.slots = [Slot(number) for number in range(processes)]
        self.run_child = run_child
        #: Called with a child's membership id when it exits while not stopping.
        self.on_death = on_death
        self.stopping: str | None = None
        self._pending: list[int] = []
        self._wakeup = Wakeup()

    def _fork(self, slot: Slot) -> None:
        suffix = uuid.uuid4().hex[:8]
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.environ[PROCESS_ID_ENV] = new_process_id(os.getpid(), suffix)
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTTIN, signal.SIGCHLD):
                    signal.signal(signum, signal.SIG_DFL)
                self._wakeup.close()  # the supervisor's
                stop_with_parent()
                code = self.run_child(slot.number)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                log.exception("worker process %d failed", slot.number)
            finally:
                logging.shutdown()
                os._exit(code)
        slot.pid, slot.started = pid, time.monotonic()
        slot.process_id = new_process_id(pid, suffix)
        log.info("started worker process %d (pid %d)", slot.number, pid)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._pending.append(signum)
        self._wakeup.set()

    def _on_child(self, signum: int, frame: Any) -> None:
        self._wakeup.set()

    def _next_look(self) -> float:
        """Seconds the supervisor may sleep: until the first restart due, at most IDLE."""
        if self.stopping is not None:
            return IDLE
        due = [slot.restart_at for slot in self.slots if slot.pid is None]
        return max(0.0, min([IDLE, *(at - time.monotonic() for at in due)]))

    def _forward(self, signum: int) -> None:
        for slot in self.slots:
            if slot.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, signum)

    def _handle_signals(self) -> None:
        while self._pending:
            signum = self._pending.pop(0)
            name = signal.Signals(signum).name.removeprefix("SIG")
            if signum in (signal.SIGTERM, signal.SIGINT):
                if self.stopping is None:
                    log.info("%s: stopping the worker processes", name)
                self.stopping = name
            self._forward(signum)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = next((s for s in self.slots if s.pid == pid), None)
            if slot is None:
                continue
            code = exit_code(status)
            slot.pid = None
            slot.exit_codes.append(code)
            if self.stopping is not None:
                log.info("worker process %d (pid %d) exited with %d", slot.number, pid, code)
                continue
            self._bury(slot.process_id)
            lived = time.monotonic() - slot.started
            slot.failures = 1 if lived >= HEALTHY_AFTER else slot.failures + 1
            delay = RESTARTS.delay(slot.failures)
            slot.restart_at = time.monotonic() + delay
            log.warning(
                "worker process %d (pid %d) exited with %d after %.1fs; restarting in %.1fs",
                slot.number,
                pid,
                code,
                lived,
                delay,
            )

    def _bury(self, process_id: str) -> None:
        if self.on_death is None:
            return
        try:
            self.on_death(process_id)
        except Exception as exc:  # noqa: BLE001 - its leases then lapse after their TTL
            log.warning(
                "could not free the leases of %s: %s: %s", process_id, type(exc).__name__, exc
            )

    def run(self) -> int:
        """Fork the children and supervise them until TERM or INT; returns the exit code."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTTIN):
            signal.signal(signum, self._on_signal)
        signal.signal(signal.SIGCHLD, self._on_child)
        for slot in self.slots:
            self._fork(slot)
        while True:
            self._handle_signals()
            self._reap()
            if self.stopping is not None and all(slot.pid is None for slot in self.slots):
                break
            if self.stopping is None:
                for slot in self.slots:
                    if slot.pid is None and time.monotonic() >= slot.restart_at:
                        self._fork(slot)
            self._wakeup.wait(self._next_look())
        self._wakeup.close()
        codes = [slot.exit_codes[-1] for slot in self.slots if slot.exit_codes]
        log.info("stopped; worker processes exited with %s", codes)
        return 0 if all(code == 0 for code in codes) else 1
