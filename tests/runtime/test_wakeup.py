"""The worker process's main thread sleeps until something wakes it: a signal, a stop
request, a thread that ends (lowkiq.runtime.wakeup), not polling its flags many times a second."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Callable

from lowkiq.runtime.wakeup import Wakeup
from tests.apps.runner import WorkerProcess, eventually, main_thread_wakeups


def test_a_wait_ends_when_another_thread_sets_it():
    wakeup = Wakeup()
    try:
        assert not wakeup.wait(0.05)
        threading.Timer(0.1, wakeup.set).start()
        started = time.monotonic()
        assert wakeup.wait(10)
        assert time.monotonic() - started < 5
        assert not wakeup.wait(0.05)  # the wake-up was consumed
    finally:
        wakeup.close()


def test_a_signal_handler_wakes_the_waiting_thread():
    wakeup = Wakeup()
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: wakeup.set())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        started = time.monotonic()
        assert wakeup.wait(10)
        assert time.monotonic() - started < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        wakeup.close()


def test_a_closed_wakeup_ignores_set():
    wakeup = Wakeup()
    wakeup.close()
    wakeup.set()  # no error, and no write to whatever file took its number


def test_a_wakeup_dropped_unclosed_closes_its_pipe():
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    for _ in range(50):
        Wakeup().set()  # e.g. a server built and never stopped
    gc.collect()
    assert open_fds() - before < 10


def test_an_idle_worker_s_main_thread_sleeps_and_wakes_on_signals(
    worker_processes: Callable[..., WorkerProcess],
):
    process = worker_processes()
    pid = process.process.pid
    time.sleep(1)  # the rest of its start-up
    before = main_thread_wakeups(pid)
    time.sleep(3)
    # About once a second (MAIN_IDLE); it looked at its flags 20 times a second before.
    assert main_thread_wakeups(pid) - before <= 12
    process.signal(signal.SIGTTIN)
    eventually(lambda: "wrote the stacks" in process.output(), 10)
    process.signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert "TERM: stopping after the running batches" in process.output()
