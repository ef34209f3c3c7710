"""The ``lowkiq worker`` process: threads, lifecycle and signals (SPEC §4, §7, §8, §11).

:class:`Server` joins the membership and serves the shards whose leases it
holds (:mod:`lowkiq.ownership`): by default the automatic assignment spreads
every shard of ``settings.workers`` over the live processes, weighted by
threads; a static splitter (``--nodes/--node``, or a custom
``build_splitter``) fixes this process's shards instead, which it still serves
only under their leases.  One dispatcher (:mod:`lowkiq.runtime.dispatcher`)
pops the shards in the scheduler's order and hands their batches to
``threads_per_node`` executor threads, any of which takes any batch.
TERM or INT stops it gracefully (running batches finish, leases are released,
exit 0); a second TERM or INT exits at once (the running batches are restored by
their shards' next owners); TTIN writes every thread's stack to
:attr:`Server.stacks_path`.
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
from wsgiref.simple_server import WSGIServer

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.cluster import bounded, thread_client
from lowkiq.clients.connection import Client, describe_redis
from lowkiq.clients.forking import WORKER_SIGNALS, worker_signals_installed
from lowkiq.clients.memory_policy import check_eviction
from lowkiq.clients.retry import Retries
from lowkiq.errors import ConfigurationError, is_out_of_memory
from lowkiq.health import Heartbeats
from lowkiq.health.memory_watch import MemoryWatch
from lowkiq.health.verdicts import ProcessState
from lowkiq.limits.group_caps import GroupCaps
from lowkiq.limits.throttling import RateLimits
from lowkiq.ownership.cancels import CancelReader
from lowkiq.ownership.coordinator import Coordinator, Plan
from lowkiq.ownership.events import Mailbox, Released
from lowkiq.ownership.membership import (
    Membership,
    membership_ttl,
    own_process_id,
    socket_timeout_of,
)
from lowkiq.perform.coroutines import close_thread_loop
from lowkiq.periodic.runner import ScheduleRunner
from lowkiq.runtime.backoff import redis_backoff
from lowkiq.runtime.dispatcher import Dispatcher
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.runtime.wakeup import Wakeup
from lowkiq.settings import Settings, pooled_client, settings
from lowkiq.storage.group_claims import GroupClaims
from lowkiq.strategies.splitters import build_default_splitter, with_threads
from lowkiq.telemetry import prometheus
from lowkiq.telemetry.recorder import Recorder
from lowkiq.version import __version__
from lowkiq.worker import Worker
from lowkiq.workflows.sweeper import Sweeper

log = logging.getLogger("lowkiq.server")

#: How often, seconds, the main thread looks at signals and threads while stopping, or
#: while it waits for Redis to answer at start.
MAIN_TICK = 0.05
#: Longest sleep, seconds, of the running process's main thread: signals, stop requests,
#: fatal errors and ending threads wake it at once (lowkiq.runtime.wakeup).
MAIN_IDLE = 1.0


@dataclass(frozen=True)
class Shard:
    """One shard of one worker: what splitters deal."""

    worker: type[Worker]
    index: int

    def __repr__(self) -> str:
        return f"{self.worker.__name__}:{self.index}"


def all_shards(workers: list[type[Worker]], config: Settings = settings) -> list[Shard]:
    """Every shard of every worker, in worker order: ``A0 A1 A2 B0 B1 ...`` (the shards
    of the queue's layout: numbered from its base once it was resharded)."""
    return [
        Shard(worker, index) for worker in workers for index in worker.queue(config=config).shards
    ]


#: The shares of ``lease_ttl`` that one of lowkiq's own calls waits, at most, on a Redis
#: that does not answer (whatever the app's client says, unless its timeout is shorter;
#: at least MIN_CALL_TIMEOUT): the dispatcher's (a pop or an ack takes milliseconds), and
#: the coordinator's, metrics' and schedules' (a heartbeat that carries renewals must end
#: well before the leases do).
DISPATCHER_CALL_SHARE = 1 / 6
COORDINATOR_CALL_SHARE = 1 / 3
#: Seconds: the shortest bound of a call's wait.
MIN_CALL_TIMEOUT = 1.0


def call_timeout(lease_ttl: float, share: float) -> float:
    """Seconds a call waits at most: ``share`` of ``lease_ttl``, at least MIN_CALL_TIMEOUT."""
    return max(MIN_CALL_TIMEOUT, lease_ttl * share)


#: Seconds :meth:`Server.stop` waits for the renewer to end (it ends within a
#: renewal's socket timeout once told to; past this its leases simply lapse).
RENEWER_JOIN = 5.0


class Server:
    """Processes the queues of ``settings.workers`` with ``threads_per_node`` threads."""

    def __init__(
        self, config: Settings = settings, metrics_address: tuple[str, int] | None = None
    ) -> None:
        self.settings = config
        #: ``(host, port)`` to serve the Prometheus metrics on, if any.
        self.metrics_address = metrics_address
        self.stop_event = threading.Event()
        #: Made by build(): every batch's lifecycle, and the executor threads.
        self.dispatcher: Dispatcher | None = None
        self.threads: list[threading.Thread] = []
        self.fatal: BaseException | None = None
        self.stacks_path = Path(tempfile.gettempdir()) / f"lowkiq-{os.getpid()}-stacks.txt"
        self._stop_signal: str | None = None
        self._signals = 0
        self._dump_stacks = False
        # Wakes the main thread in wait(): set with every flag wait() looks at.
        self._wakeup = Wakeup()
        # Made by build(): this process's membership id and ownership loop.
        self.process_id = ""
        self.coordinator: Coordinator[ShardHandler] | None = None
        # Made by build(): the client of the settings the others are made from, and the
        # same with bounded calls (see call_timeout).
        self.template: Client | None = None
        self.own_template: Client | None = None
        self.coordinator_thread: threading.Thread | None = None
        # Leases are renewed until the threads have released them (after stop_event).
        self.renewals_stop = threading.Event()
        self.renewer_thread: threading.Thread | None = None
        #: Made by build(): the renewer's own client.
        self.renewal_client: Client | None = None
        # Made by build(): the metrics history's per-process counts and flush thread.
        self.recorder: Recorder | None = None
        # Made by build(): the periodic jobs' thread.
        self.periodic: ScheduleRunner | None = None
        #: The rate limit in force per queue, read again on every heartbeat.
        self.rate_limits = RateLimits({})
        self.metrics_server: WSGIServer | None = None
        #: The loops' heartbeats, read by the health endpoints (lowkiq.health).
        self.health = Heartbeats()

    # -- set-up ------------------------------------------------------------

    def plan(self) -> Plan:
        """This process's plan: automatic assignment, or the static splitter's deal."""
        config = self.settings
        workers = list(config.workers)
        if not workers:
            raise ConfigurationError("settings.workers is empty: no queue to process")
        if config.build_splitter is build_default_splitter:
            return Plan()
        # The splitter's lists, one per thread, say which shards are this process's (the
        # one dispatcher serves them all, whatever thread's list the splitter put each in).
        splitter = with_threads(config.build_splitter(), config.threads_per_node)
        per_thread = [shards for shards in splitter(all_shards(workers, config)) if shards]
        seen: set[Shard] = set()
        static: list[tuple[str, int]] = []
        for shards in per_thread:
            for shard in shards:
                if not isinstance(shard, Shard) or shard in seen:
                    raise ConfigurationError(f"the splitter gave out {shard!r} twice or made it up")
                seen.add(shard)
                static.append((shard.worker.queue_name, shard.index))
        return Plan(static=tuple(static))

    def build(self) -> Coordinator[ShardHandler]:
        """Make the dispatcher, on its own connection, and the coordinator."""
        config = self.settings
        if config.heartbeat_interval * 2 > config.lease_ttl:
            raise ConfigurationError(
                f"setting heartbeat_interval ({config.heartbeat_interval}) must be at most half "
                f"of lease_ttl ({config.lease_ttl}), so a lease is renewed before it expires"
            )
        plan = self.plan()
        workers = {worker.queue_name: worker for worker in config.workers}
        self.rate_limits = RateLimits({name: w.rate_limit for name, w in workers.items()})
        # One client of the settings that the others are made from, with the bounded
        # calls of lowkiq's own threads: the coordinator's, metrics' and schedules'
        # share one (on a Redis Cluster, its slot map: a load talks to every node, tens
        # of milliseconds), the executor threads' connections the settings', the
        # dispatcher has its own.
        self.template = config.redis()
        own = self.own_template = bounded(
            self.template, call_timeout(config.lease_ttl, COORDINATOR_CALL_SHARE)
        )
        client = pooled_client(own, 4, config.pool_timeout)
        recorder = self.recorder = Recorder(client, workers)
        self.process_id = own_process_id()
        ttl = membership_ttl(config.lease_ttl, config.heartbeat_interval)
        dispatching = thread_client(
            self.template, call_timeout(config.lease_ttl, DISPATCHER_CALL_SHARE)
        )
        # Every worker's: a per-group rate limit may also be set at run time.
        group_caps = {
            name: GroupCaps(
                GroupClaims(
                    w.queue(dispatching, config),
                    w.group_concurrency,
                    config.lease_ttl,
                    w.batch_size,
                ),
                self.rate_limits,
            )
            for name, w in workers.items()
        }
        reports: Mailbox[Released] = Mailbox()
        dispatcher = self.dispatcher = Dispatcher(
            dispatching,
            config.threads_per_node,
            config.build_scheduler(),
            config.poll_interval,
            self.stop_event,
            waker=pooled_client(own, 2, config.pool_timeout),
            heartbeats=self.health,
            recorder=recorder,
            fatal=self._fatal,
            thread_scope=config.own_connection,
            shutdown_timeout=config.shutdown_timeout,
            group_caps=group_caps,
            reports=reports,
            handoff=Membership(dispatching, self.process_id, ttl).handoff,
        )

        # Schedules run on every process, also those added at run time to an app that
        # declares none; their changes are read when the config version moves.
        periodic_client = pooled_client(own, 2, config.pool_timeout)
        self.periodic = ScheduleRunner(periodic_client, config)
        self._check_socket_timeout(client)
        self.renewal_client = self._renewal_client()
        coordinator = Coordinator(
            client,
            Membership(client, self.process_id, ttl),
            [worker.queue(client, config) for worker in workers.values()],
            plan,
            dispatcher,
            self._make_handler,
            config.lease_ttl,
            config.heartbeat_interval,
            config.threads_per_node,
            renewal_client=self.renewal_client,
            # Rate limits set at run time, and cancels, are read when the config version moves.
            config_readers=[
                self.rate_limits.follow,
                CancelReader(workers).follow,
                lambda client: self.periodic.notify() if self.periodic else None,
            ],
            reports=reports,
        )
        self.coordinator = coordinator
        return coordinator

    def _make_handler(
        self, queue_name: str, shard: int, token: str, on_lost: Callable[[Any], None]
    ) -> ShardHandler:
        """The handler of a shard whose lease was just acquired (``on_lost``: called when
        it finds its lease gone)."""
        config, dispatcher = self.settings, self.dispatcher
        assert dispatcher is not None
        worker = next(w for w in config.workers if w.queue_name == queue_name)
        return ShardHandler(
            worker,
            shard,
            worker.queue(dispatcher.client, config),
            token,
            config.server_middlewares,
            config.format_error,
            on_lost=on_lost,
            rate_limits=self.rate_limits,
            group_caps=dispatcher.group_caps.get(queue_name),
        )

    def _renewal_client(self) -> Client | None:
        """A connection of the renewer's own on one server, so that no wait of the
        coordinator's (it holds its small pool's connections) delays a renewal; ``None``
        on a Redis Cluster, whose client has a connection pool per node, unbounded."""
        template = self.own_template or self.settings.redis()
        if isinstance(template, redis.RedisCluster):
            return None
        return pooled_client(template, 1, self.settings.pool_timeout)

    def _check_socket_timeout(self, client: Client) -> None:
        """Warn of a socket timeout that would let leases lapse while a renewal hangs on
        a dead connection (blocking waits are capped below any socket timeout)."""
        timeout = socket_timeout_of(client)
        ttl = self.settings.lease_ttl
        if timeout is not None and timeout * 2 > ttl:
            log.warning(
                "the Redis client's socket_timeout (%ss) is not below half of lease_ttl (%ss): "
                "a renewal stuck on a dead connection lets this process's leases lapse",
                timeout,
                ttl,
            )

    def _check_cluster_failover(self, client: Client) -> None:
        """Warn when a Redis Cluster fails over more slowly than a lease lasts."""
        if not isinstance(client, redis.RedisCluster):
            return
        try:
            replies: Any = client.config_get("cluster-node-timeout")
        except (redis.RedisError, RedisClusterException) as exc:
            log.debug("could not read cluster-node-timeout: %s", exc)
            return
        values = replies.values() if isinstance(replies, dict) else [replies]
        for value in values:
            found = value.get("cluster-node-timeout") if isinstance(value, dict) else None
            if found is not None and int(found) / 1000 >= self.settings.lease_ttl:
                log.warning(
                    "cluster-node-timeout is %ss, not below lease_ttl (%ss): while a master "
                    "fails over, the leases of its shards lapse and its shards wait; set "
                    "cluster-node-timeout below lease_ttl (see the Redis Cluster guide)",
                    int(found) / 1000,
                    self.settings.lease_ttl,
                )
                return

    def _until_redis_answers(self, action: Callable[[], Any]) -> Any:
        """``action()``, again and again while Redis is unreachable (a connection refused
        or timing out: a hung server) or full (out of memory under ``noeviction``);
        ``None`` when the process is told to stop first."""
        retries = Retries(
            "start",
            log,
            redis_backoff(self.settings.poll_interval),
            waiting_for=f"Redis at {self.health.coordinator.redis}"
            if self.health.coordinator.redis
            else "Redis",
        )
        while True:
            try:
                return action()
            except (
                redis.ConnectionError,
                redis.TimeoutError,
                redis.ResponseError,
                RedisClusterException,
            ) as exc:
                if isinstance(exc, redis.ResponseError) and not is_out_of_memory(exc):
                    raise
                wait = retries.failed(exc, _why_redis_failed(exc))
                self.health.coordinator.failed(exc)  # the /ready page names what it waits for
                if self._stop_signal is not None:
                    return None
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline:
                    if self._stop_signal is not None or self.stop_event.is_set():
                        return None
                    time.sleep(MAIN_TICK)

    def start(self) -> None:
        """Run ``on_server_init``, join the membership, take the first shards, start threads."""
        config = self.settings
        config.on_server_init()
        # A Redis Cluster's client reads its nodes when made: while none answers, wait.
        coordinator = self._until_redis_answers(self.build)
        if coordinator is None:
            return
        dispatcher = self.dispatcher
        assert dispatcher is not None
        self.health.coordinator.redis = describe_redis(dispatcher.client)
        log.info(
            "lowkiq %s, pid %d, process %s, Redis %s",
            __version__,
            os.getpid(),
            self.process_id,
            self.health.coordinator.redis,
        )
        mode = "static splitter" if coordinator.plan.static is not None else "automatic"
        log.info(
            "shard assignment: %s; lease TTL %.1fs, heartbeat every %.1fs",
            mode,
            config.lease_ttl,
            config.heartbeat_interval,
        )
        self._until_redis_answers(lambda: check_eviction(coordinator.client, config.allow_eviction))
        if self._stop_signal is not None:
            return
        memory = MemoryWatch(coordinator.client, config.allow_eviction, self.health.redis_memory)
        memory.start(self.stop_event)
        if self.metrics_address is not None:
            self.serve_metrics(*self.metrics_address)
        # Renewals start first: the first round may acquire many leases, one by one.
        self.renewer_thread = threading.Thread(
            target=coordinator.renewer.run,
            args=(self.renewals_stop,),
            name="lowkiq-renewer",
            daemon=True,
        )
        self.renewer_thread.start()
        self._until_redis_answers(coordinator.beat)
        if self._stop_signal is not None:
            return
        self.health.coordinator.succeeded()
        self._check_cluster_failover(coordinator.client)
        dispatcher.apply()
        log.info("%d threads serve %s", dispatcher.executor.size, dispatcher.describe())
        self.threads.append(
            threading.Thread(
                target=self._run_dispatcher,
                args=(dispatcher,),
                name="lowkiq-dispatcher",
                daemon=True,
            )
        )
        self.coordinator_thread = threading.Thread(
            target=self._run_coordinator,
            args=(coordinator,),
            name="lowkiq-coordinator",
            daemon=True,
        )
        log.info("send TTIN to write every thread's stack to %s", self.stacks_path)
        for thread in self.threads:
            thread.start()
        self.coordinator_thread.start()
        if self.recorder is not None:
            self.recorder.start()
        if self.periodic is not None:
            self.periodic.start()
        Sweeper(coordinator.client).start(self.stop_event)

    def serve_metrics(self, host: str, port: int) -> None:
        """Serve the Prometheus metrics at ``http://host:port/metrics`` until :meth:`stop`."""
        try:
            self.metrics_server = prometheus.serve(port, host, self.settings)[0]
        except OSError as exc:
            raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
        log.info("Prometheus metrics on http://%s:%d/metrics", host, port)

    def _run_coordinator(self, coordinator: Coordinator[ShardHandler]) -> None:
        retries = Retries("heartbeat", log, redis_backoff(self.settings.poll_interval))
        heartbeat = self.health.coordinator
        while not self.stop_event.is_set():
            try:
                coordinator.membership.wait_for_nudge(coordinator.next_wait())
                if self.stop_event.is_set():
                    break
                coordinator.beat()
            except (redis.RedisError, RedisClusterException) as exc:
                heartbeat.failed(exc)
                self.stop_event.wait(retries.failed(exc, _why_redis_failed(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - a bug here must not go unnoticed
                self._fatal(exc)
                return
            heartbeat.succeeded()
            retries.succeeded()
            if coordinator.stop_requested.is_set():
                self.request_stop()

    # -- the threads -------------------------------------------------------

    def _run_dispatcher(self, dispatcher: Dispatcher) -> None:
        try:
            dispatcher.run()
        except BaseException as exc:  # noqa: BLE001 - a fatal error stops the whole process
            self._fatal(exc)
        finally:
            # The event loop of an async retries_exhausted, if one ran on this thread.
            close_thread_loop()
            self._wakeup.set()  # the main thread looks whether the dispatcher is left

    def _fatal(self, exc: BaseException) -> None:
        log.critical(
            "fatal error in %s, stopping: %s: %s",
            threading.current_thread().name,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        try:
            self.settings.last_words(exc)
        except Exception:
            log.exception("last_words raised")
        # Only then is the main thread told: last_words runs before the process stops.
        if self.fatal is None:
            self.fatal = exc
        self._wakeup.set()

    # -- lifecycle ---------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """TERM/INT: graceful stop (a second TERM or INT exits at once); TTIN: dump stacks."""
        previous = {signum: signal.getsignal(signum) for signum in WORKER_SIGNALS}
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_int)
        if hasattr(signal, "SIGTTIN"):
            signal.signal(signal.SIGTTIN, self._on_ttin)
        worker_signals_installed(previous)  # a child forked in perform gets them back

    def _on_term(self, signum: int, frame: Any) -> None:
        self._on_stop_signal("TERM", 143)

    def _on_int(self, signum: int, frame: Any) -> None:
        self._on_stop_signal("INT", 130)

    def _on_stop_signal(self, name: str, exit_code: int) -> None:
        """The first TERM or INT stops gracefully; a second one exits at once."""
        self._signals += 1
        if self._signals > 1:
            log.warning(
                "second %s: exiting now; running batches are restored by their shards' next owners",
                name,
            )
            logging.shutdown()
            os._exit(exit_code)
        self._stop_signal = self._stop_signal or name
        self._wakeup.set()

    def _on_ttin(self, signum: int, frame: Any) -> None:
        self._dump_stacks = True
        self._wakeup.set()

    def process_state(self) -> ProcessState:
        """What this process knows of itself now (its coordinator, threads and stop), for
        the health endpoints (:mod:`lowkiq.health.http`)."""
        coordinator = self.coordinator
        if coordinator is None:
            return ProcessState(stopping=self.stop_event.is_set())
        return ProcessState(
            process_id=self.process_id,
            shards=[f"{queue}:{shard}" for queue, shard in coordinator.holdings.owned()],
            busy=self.dispatcher.busy if self.dispatcher is not None else 0,
            quiet=coordinator.quiet,
            stopping=self.stop_event.is_set()
            or coordinator.closing
            or coordinator.stop_requested.is_set(),
        )

    def request_stop(self) -> None:
        """Stop taking batches; running ones finish.  Not for signal handlers."""
        self._stop_signal = self._stop_signal or "request"
        self._wakeup.set()

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
        """Block the main thread until a stop signal, a stop request, a fatal error or the
        end of the dispatcher; it sleeps until one of them wakes it (at most
        MAIN_IDLE at a time)."""
        while self._stop_signal is None and self.fatal is None:
            if not any(thread.is_alive() for thread in self.threads):
                break
            if self._dump_stacks:
                self._dump_stacks = False
                self.write_stacks()
            self._wakeup.wait(MAIN_IDLE)

    def stop(self) -> None:
        """Stop every thread after its running batch and wait for them, in this order: take
        no more work, let the running batches end, stop renewing, leave the membership,
        stop the other services, close the connections."""
        if self._stop_signal and self.fatal is None:
            log.info("%s: stopping after the running batches", self._stop_signal)
        if self.own_template is None:
            # Stopped while its start waited for Redis: nothing was built to stop.
            self.stop_event.set()
            self._stop_services()
            self._wakeup.close()
            return
        waker = thread_client(self.own_template)
        try:
            self._take_no_more_work(waker)
            self._join_threads()
            self._stop_renewing()
            self._leave()
            self._stop_services()
        finally:
            waker.close()
            self._close_clients()

    def _take_no_more_work(self, waker: Client) -> None:
        """Tell the others this process is going, and end the dispatcher's and the
        coordinator's waits (the dispatcher then pops nothing more)."""
        coordinator = self.coordinator
        if coordinator is not None:
            coordinator.close()
        self.stop_event.set()
        if self.dispatcher is not None:
            self.dispatcher.wake(waker)
        if coordinator is not None:
            with contextlib.suppress(redis.RedisError):
                coordinator.membership.wake()

    def _join_threads(self) -> None:
        """Wait for the threads (the running batches may take up to shutdown_timeout: the
        process stays a live member meanwhile, and tells which batches were asked to
        stop); a SIGTTIN meanwhile writes the threads' stacks."""
        coordinator = self.coordinator
        beaten = time.monotonic()
        for thread in [*self.threads, self.coordinator_thread]:
            while thread is not None and thread.is_alive():
                thread.join(MAIN_TICK)
                if self._dump_stacks:
                    self._dump_stacks = False
                    self.write_stacks()
                if (
                    coordinator is not None
                    and time.monotonic() - beaten >= self.settings.heartbeat_interval
                ):
                    beaten = time.monotonic()
                    coordinator.close()

    def _stop_renewing(self) -> None:
        """Stop the renewer (a lease it no longer renews lapses)."""
        self.renewals_stop.set()
        if self.renewer_thread is not None:
            self.renewer_thread.join(RENEWER_JOIN)
            if self.renewer_thread.is_alive():
                log.warning("the renewer did not end within %ss; its leases lapse", RENEWER_JOIN)

    def _leave(self) -> None:
        """Release the leases left and deregister (on a Redis error, the process ages out of
        the list and its leases lapse)."""
        coordinator = self.coordinator
        if coordinator is None:
            return
        try:
            if self.dispatcher is not None and self.dispatcher.abandoned:
                # Their batches still run: the leases lapse once the process is gone.
                coordinator.holdings.released(self.dispatcher.abandoned)
            coordinator.release_remaining()
            coordinator.leave()
        except redis.RedisError as exc:
            log.warning("could not deregister (%s); this process ages out of the list", exc)

    def _stop_services(self) -> None:
        """Stop the schedules, the metrics' recorder (its last counts written) and the
        metrics server."""
        if self.periodic is not None:
            self.periodic.stop()
        if self.recorder is not None:
            self.recorder.stop()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()

    def _close_clients(self) -> None:
        """Close the connections of lowkiq's own threads."""
        if self.renewal_client is not None:
            self.renewal_client.close()
        renewer_alive = self.renewer_thread is not None and self.renewer_thread.is_alive()
        if self.coordinator is not None and not renewer_alive:
            self.coordinator.renewer.close()
        if self.dispatcher is not None:
            self.dispatcher.client.close()
            if self.dispatcher.waker is not None:
                self.dispatcher.waker.close()
        self._wakeup.close()

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


def _why_redis_failed(error: BaseException) -> str:
    """What a failed call of lowkiq's own loops is logged with: Redis full, or the error."""
    if is_out_of_memory(error):
        return (
            f"Redis is full ({error}): it refuses writes until memory is freed or maxmemory raised"
        )
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError, RedisClusterException)):
        return f"Redis is unreachable ({error})"
    return f"Redis error ({type(error).__name__}: {error})"
