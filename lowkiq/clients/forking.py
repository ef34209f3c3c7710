"""A child forked inside a worker process is an ordinary process, not a worker.

``perform`` may fork (``os.fork``, a ``multiprocessing`` process of the fork start
method).  The child is a copy of the worker process made from the performing thread,
so without care it keeps what made the parent a worker: lowkiq's TERM and INT handlers
(TERM then only sets a flag for a main loop the child does not run, so the child ignores
it), the performing thread's Redis connection (the child would talk on the parent's
socket, mixing its replies with the parent's), and the batch being performed.

``os.register_at_fork(after_in_child=...)`` undoes that in every forked child:

* once :func:`worker_signals_installed` was called (the ``lowkiq worker`` process
  installed its handlers), the handlers of TERM, INT and TTIN that are still lowkiq's
  go back to what they were before (Python's defaults: TERM ends the process, INT
  raises ``KeyboardInterrupt``);
* every :class:`~lowkiq.settings.SharedClient` registered with
  :func:`forget_in_children` forgets its clients without closing them (their sockets are
  the parent's): the child's first call makes its own connection;
* the child is in no batch: ``lowkiq.current_batch()`` is ``None`` there.

A child that returns out of ``perform`` into lowkiq's executor thread exits there
(:func:`exit_if_forked`) instead of living on as a copy of the worker's thread.
``subprocess`` is not concerned: its child runs a new program.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

log = logging.getLogger("lowkiq.forking")

#: The signals whose handlers a ``lowkiq worker`` process installs.
WORKER_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGTTIN") if hasattr(signal, name)
)


class ForgetsInChild(Protocol):
    """Something that holds connections a forked child must not use."""

    def forget_after_fork(self) -> None:
        """In the child: drop the parent's connections without closing them."""


# The handlers lowkiq installed, by signal, and the ones they replaced.
_installed: dict[int, tuple[Any, Any]] = {}
# Holders of connections (weakly: a settings object dropped is forgotten).
_holders: weakref.WeakSet[Any] = weakref.WeakSet()


def worker_signals_installed(
    previous: dict[int, Any], signals: Iterable[int] = WORKER_SIGNALS
) -> None:
    """The worker process just installed its handlers of ``signals``, replacing
    ``previous`` (signal -> handler before): a forked child gets ``previous`` back for
    each of them it did not change since."""
    for signum in signals:
        _installed[signum] = (signal.getsignal(signum), previous.get(signum, signal.SIG_DFL))


def forget_in_children(holder: ForgetsInChild) -> None:
    """Call ``holder.forget_after_fork()`` in every child forked from now on."""
    _holders.add(holder)


def exit_if_forked(parent: int, failed: bool) -> None:
    """On a thread that performed for process ``parent``: when this is a child forked
    inside ``perform`` that came back out of it, end the child here (exit code 1 when
    ``perform`` raised, else 0); it must not go on as a copy of the worker's thread."""
    if os.getpid() == parent:
        return
    log.warning(
        "a process forked inside perform (pid %d, of worker process %d) returned out of "
        "perform: it exits (end a forked child with os._exit)",
        os.getpid(),
        parent,
    )
    logging.shutdown()
    os._exit(1 if failed else 0)


def _restore_signals() -> None:
    """Give each signal lowkiq handles its previous handler back, unless changed since."""
    installed = dict(_installed)
    _installed.clear()  # the child is no worker process: its own children keep theirs
    for signum, (ours, previous) in installed.items():
        with contextlib.suppress(ValueError, OSError, TypeError):
            if signal.getsignal(signum) is ours:
                signal.signal(signum, previous)


def _forget_batch() -> None:
    """The child is in no batch (nothing is imported here: the module is loaded when a
    batch ran)."""
    module = sys.modules.get("lowkiq.running")
    if module is not None:
        module.running.set(None)


def _in_child() -> None:
    """``os.register_at_fork(after_in_child=...)``: runs in every forked child."""
    steps: list[Callable[[], None]] = [_restore_signals, _forget_batch]
    steps.extend(holder.forget_after_fork for holder in list(_holders))
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - the child must start whatever happens here
            log.exception("after a fork, in the child: %r failed", step)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
