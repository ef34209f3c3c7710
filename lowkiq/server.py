"""The ``lowkiq worker`` process: threads, lifecycle and signals (SPEC §4, §7, §8).

:class:`Server` deals every shard of ``settings.workers`` to threads with the
splitter, restores the processing areas a previous run left behind, and runs
one scheduler per thread.  TERM or INT stops it gracefully (running batches
finish, exit 0); a second INT exits at once; TTIN writes every thread's stack
to :attr:`Server.stacks_path`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from lowkiq.connection import ThreadClient, describe_redis
from lowkiq.errors import ConfigurationError
from lowkiq.lane import Lane
from lowkiq.settings import Settings, settings
from lowkiq.shard_handler import DeferredAck, ShardHandler
from lowkiq.splitters import with_threads
from lowkiq.version import __version__
from lowkiq.worker import Worker

log = logging.getLogger("lowkiq.server")

#: Longest wait, seconds, between reconnection attempts while Redis is down.
BACKOFF_CAP = 5.0
#: How often, seconds, the main thread looks at signals and threads.
MAIN_TICK = 0.05


@dataclass(frozen=True)
class Shard:
    """One shard of one worker: what splitters deal."""

    worker: type[Worker]
    index: int

    def __repr__(self) -> str:
        return f"{self.worker.__name__}:{self.index}"


def all_shards(workers: list[type[Worker]]) -> list[Shard]:
    """Every shard of every worker, in worker order: ``A0 A1 A2 B0 B1 ...``."""
    return [Shard(worker, index) for worker in workers for index in range(worker.shards_count)]


def backoff(failures: int, poll_interval: float) -> float:
    """Seconds to wait after ``failures`` consecutive Redis errors (doubling, capped)."""
    return min(max(BACKOFF_CAP, poll_interval), poll_interval * 2 ** min(failures - 1, 16))


class Server:
    """Processes the queues of ``settings.workers`` with ``threads_per_node`` threads."""

    def __init__(self, config: Settings = settings) -> None:
        self.settings = config
        self.stop_event = threading.Event()
        self.lanes: list[Lane] = []
        self.threads: list[threading.Thread] = []
        self.fatal: BaseException | None = None
        self.stacks_path = Path(tempfile.gettempdir()) / f"lowkiq-{os.getpid()}-stacks.txt"
        self._stop_signal: str | None = None
        self._interrupts = 0
        self._dump_stacks = False

    # -- set-up ------------------------------------------------------------

    def build_lanes(self) -> list[Lane]:
        """Deal the shards to threads and build each thread's handlers on its own connection."""
        config = self.settings
        workers = list(config.workers)
        if not workers:
            raise ConfigurationError("settings.workers is empty: no queue to process")
        splitter = with_threads(config.build_splitter(), config.threads_per_node)
        groups = splitter(all_shards(workers))
        seen: set[Shard] = set()
        for group in groups:
            for shard in group:
                if not isinstance(shard, Shard) or shard in seen:
                    raise ConfigurationError(f"the splitter dealt {shard!r} twice or made it up")
                seen.add(shard)
        lanes = []
        for group in groups:
            if not group:
                continue
            client = ThreadClient(config.redis())
            deferred = DeferredAck()
            handlers = [
                ShardHandler(
                    shard.worker,
                    shard.index,
                    shard.worker.queue(client, config),
                    deferred,
                    config.server_middlewares,
                    config.format_error,
                )
                for shard in group
            ]
            lanes.append(Lane(client, handlers, deferred, config.poll_interval, self.stop_event))
        return lanes

    def restore(self) -> int:
        """Put back every processing area of this process's shards (left by a crash)."""
        restored = 0
        for lane in self.lanes:
            for handler in lane.handlers:
                restored += handler.restore()
        return restored

    def _until_redis_answers(self, action: Callable[[], Any]) -> Any:
        failures = 0
        while True:
            try:
                return action()
            except redis.ConnectionError as exc:
                failures += 1
                if failures == 1:
                    log.warning("Redis is unreachable (%s); retrying", exc)
                if self.stop_event.wait(backoff(failures, self.settings.poll_interval)):
                    return None

    def start(self) -> None:
        """Run ``on_server_init``, restore processing areas and start the threads."""
        config = self.settings
        config.on_server_init()
        self.lanes = self.build_lanes()
        build_scheduler = config.build_scheduler
        log.info(
            "lowkiq %s, pid %d, Redis %s",
            __version__,
            os.getpid(),
            describe_redis(self.lanes[0].client),
        )
        self._until_redis_answers(self.restore)
        for number, lane in enumerate(self.lanes):
            log.info("thread %d serves %s", number, lane.describe())
            thread = threading.Thread(
                target=self._run_lane,
                args=(lane, build_scheduler()),
                name=f"lowkiq-{number}",
                daemon=True,
            )
            self.threads.append(thread)
        log.info("send TTIN to write every thread's stack to %s", self.stacks_path)
        for thread in self.threads:
            thread.start()

    # -- the threads -------------------------------------------------------

    def _run_lane(self, lane: Lane, scheduler: Callable[[Lane], Callable[[], None]]) -> None:
        failures = 0
        try:
            step = scheduler(lane)
            while not self.stop_event.is_set():
                try:
                    step()
                except redis.RedisError as exc:
                    failures += 1
                    if failures == 1:
                        log.warning(
                            "Redis error, retrying with backoff: %s: %s", type(exc).__name__, exc
                        )
                    self.stop_event.wait(backoff(failures, lane.poll_interval))
                    continue
                if failures:
                    log.info("Redis answers again after %d failed attempt(s)", failures)
                    failures = 0
            lane.settle()
        except redis.RedisError as exc:
            log.warning("could not ack the last batch (%s); it is restored on the next start", exc)
        except BaseException as exc:  # noqa: BLE001 - a fatal error stops the whole process
            self._fatal(exc)

    def _fatal(self, exc: BaseException) -> None:
        log.critical(
            "fatal error in %s, stopping: %s: %s",
            threading.current_thread().name,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        if self.fatal is None:
            self.fatal = exc
        try:
            self.settings.last_words(exc)
        except Exception:
            log.exception("last_words raised")

    # -- lifecycle ---------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """TERM/INT: graceful stop (a second INT exits at once); TTIN: dump stacks."""
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_int)
        if hasattr(signal, "SIGTTIN"):
            signal.signal(signal.SIGTTIN, self._on_ttin)

    def _on_term(self, signum: int, frame: Any) -> None:
        self._stop_signal = self._stop_signal or "TERM"

    def _on_int(self, signum: int, frame: Any) -> None:
        self._interrupts += 1
        if self._interrupts > 1:
            log.warning("second INT: exiting now; running batches are restored on the next start")
            logging.shutdown()
            os._exit(130)
        self._stop_signal = self._stop_signal or "INT"

    def _on_ttin(self, signum: int, frame: Any) -> None:
        self._dump_stacks = True

    def request_stop(self) -> None:
        """Stop taking batches; running ones finish.  Not for signal handlers."""
        self._stop_signal = self._stop_signal or "request"

    def write_stacks(self) -> Path:
        """Write every thread's current stack to :attr:`stacks_path`."""
        frames = sys._current_frames()
        now = time.strftime("%Y-%m-%d %H:%M:%S")
        lines = [f"lowkiq {__version__} pid {os.getpid()} at {now}\n"]
        for thread in threading.enumerate():
            frame = frames.get(thread.ident or -1)
            lines.append(f"\n--- thread {thread.name} (ident {thread.ident})\n")
            if frame is not None:
                lines.extend(traceback.format_stack(frame))
        self.stacks_path.write_text("".join(lines))
        log.info("wrote the stacks of %d threads to %s", len(frames), self.stacks_path)
        return self.stacks_path

    def wait(self) -> None:
        """Block the main thread until a stop signal, a stop request or a fatal error."""
        while self._stop_signal is None and self.fatal is None:
            if not any(thread.is_alive() for thread in self.threads):
                break
            if self._dump_stacks:
                self._dump_stacks = False
                self.write_stacks()
            time.sleep(MAIN_TICK)

    def stop(self) -> None:
        """Stop every thread after its running batch and wait for them."""
        if self._stop_signal and self.fatal is None:
            log.info("%s: stopping after the running batches", self._stop_signal)
        self.stop_event.set()
        waker = ThreadClient(self.settings.redis())
        for lane in self.lanes:
            with contextlib.suppress(redis.RedisError):
                lane.wake(waker)
        for thread in self.threads:
            while thread.is_alive():
                thread.join(MAIN_TICK)
                if self._dump_stacks:
                    self._dump_stacks = False
                    self.write_stacks()
        waker.close()
        for lane in self.lanes:
            lane.client.close()

    def run(self) -> int:
        """Start, serve until stopped, stop; returns the process exit code."""
        self.install_signal_handlers()
        self.start()
        self.wait()
        self.stop()
        if self.fatal is not None:
            return 1
        log.info("stopped")
        return 0
