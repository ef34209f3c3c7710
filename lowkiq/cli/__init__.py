"""The ``lowkiq`` command line (click): the group, ``lowkiq worker``, ``pause``/``resume``,
``rate-limit``, ``reshard`` and ``lowkiq redis stop`` (SPEC §8).  The other commands
live beside it, each imported only when it runs:

* :mod:`lowkiq.cli.queues`: ``info`` and ``enqueue``;
* :mod:`lowkiq.cli.jobs`: ``jobs``;
* :mod:`lowkiq.cli.schedules`: ``schedules`` (list, pause, resume, change, add, remove, reset);
* :mod:`lowkiq.cli.health`: ``status`` and ``quiet``;
* :mod:`lowkiq.cli.workflows`: ``workflows``;
* :mod:`lowkiq_web.cli`: ``web``;
* :mod:`lowkiq.cli.support`: what the commands share (loading the app, one-line errors).

Thin glue: the logic lives in :mod:`lowkiq.runtime.server`, :mod:`lowkiq.cli.app_loader`
and :mod:`lowkiq.clients.embedded`.
"""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from lowkiq.cli.support import (
    LazyGroup,
    embedded_redis_option,
    fail,
    load_app_or_exit,
    require_option,
    select_workers_or_exit,
)
from lowkiq.cli.support import find_worker_or_exit as _find_worker
from lowkiq.cli.support import redis_call_or_exit as _redis_call
from lowkiq.clients.embedded import PROJECT_DIR
from lowkiq.errors import LowkiqError
from lowkiq.version import __version__

if TYPE_CHECKING:
    from lowkiq.worker import Worker

LOG_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"


@click.group(
    cls=LazyGroup,
    lazy_commands={
        "web": "lowkiq_web.cli:web",
        "status": "lowkiq.cli.health:status_command",
        "quiet": "lowkiq.cli.health:quiet_command",
        "info": "lowkiq.cli.queues:info",
        "enqueue": "lowkiq.cli.queues:enqueue",
        "jobs": "lowkiq.cli.jobs:jobs",
        "schedules": "lowkiq.cli.schedules:schedules",
        "groups": "lowkiq.cli.groups:groups",
        "workflows": "lowkiq.cli.workflows:workflows",
    },
)
@click.version_option(__version__, prog_name="lowkiq")
def main() -> None:
    """lowkiq: ordered background-job processing on Redis."""


@main.command()
@require_option(
    "The app to load: a .py file or a dotted module name. It sets lowkiq.settings "
    "(settings.workers at least) and defines the worker classes."
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    help="Processing threads in this process [default: settings.threads_per_node, "
    "env LOWKIQ_THREADS_PER_NODE, else 5].",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    help="Number of worker processes sharing the shards (by-node splitter) "
    "[env LOWKIQ_NUMBER_OF_NODES]. Use with --node.",
)
@click.option(
    "--node",
    type=click.IntRange(min=0),
    help="This process's node number, 0 to NODES-1 [env LOWKIQ_NODE_NUMBER].",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes to fork on this host (one core each), restarted when they die.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="Serve the Prometheus metrics of every worker (read from Redis) at "
    "http://HOST:PORT/metrics; with --processes, from the first worker process.",
)
@click.option(
    "--metrics-host",
    default="0.0.0.0",
    show_default=True,
    help="Address the --metrics-port server listens on.",
)
@click.option(
    "--health-port",
    type=click.IntRange(1, 65535),
    help="Serve this process's health at http://HOST:PORT/live, /ready (JSON, 200 or 503) "
    "and /metrics; with --processes N, process i on PORT+i [default: "
    "settings.health_port, env LOWKIQ_HEALTH_PORT, else not served].",
)
@click.option(
    "--health-host",
    default="0.0.0.0",
    show_default=True,
    help="Address the --health-port server listens on.",
)
@click.option(
    "--only",
    multiple=True,
    metavar="WORKER",
    help="Serve only this worker's queue (a class or queue name of settings.workers); "
    "repeat it for several. The other queues, and their periodic jobs, are left to "
    "the processes that serve them.",
)
@embedded_redis_option()
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Logging level.",
)
def worker(
    app: str,
    threads: int | None,
    nodes: int | None,
    node: int | None,
    processes: int,
    metrics_port: int | None,
    metrics_host: str,
    health_port: int | None,
    health_host: str,
    only: tuple[str, ...],
    log_level: str,
) -> None:
    """Process the queues of the workers defined by APP.

    Redis is settings.redis set by the app, else REDIS_URL, else
    redis://localhost:6379/0 (--embedded-redis: a development server in ./.lowkiq/).

    By default the shards of every queue are shared automatically by all
    live worker processes (on any hosts), each shard under a lease held by
    exactly one of them; --nodes/--node fix this process's shards instead.

    TERM or INT: stop taking batches, finish the running ones, release the
    shards, exit 0; a second INT exits at once (the shards' next owners
    restore its batches). TTIN: write every thread's stack to the file named
    at start-up. With --processes, a supervisor forwards these signals.
    """
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    if (nodes is None) != (node is None):
        fail("--nodes and --node go together")
    if nodes is not None and node is not None and node >= nodes:
        fail(f"--node must be below --nodes ({nodes}), got {node}")
    if processes > 1 and nodes is not None:
        fail("--processes and --nodes/--node cannot be combined: each node is one process")
    load_app_or_exit(app)

    import lowkiq
    from lowkiq.clients.default_redis import check_local_redis, check_redis_accepts
    from lowkiq.runtime.server import Server

    settings = lowkiq.settings
    if only:
        served = select_workers_or_exit(only)
        settings.schedules = [s for s in settings.schedules if s.worker in served]
        settings.workers = served
    try:
        if threads is not None:
            settings.threads_per_node = threads
        if nodes is not None and node is not None:
            settings.build_splitter = lambda: lowkiq.build_by_node_splitter(nodes, node)
        if health_port is not None:
            settings.health_port = health_port
        if settings.health_port is not None and settings.health_port + processes > 65536:
            fail(f"--health-port {settings.health_port} + {processes} processes passes 65535")
        check_local_redis(settings.redis)
        check_redis_accepts(settings.redis)
        metrics = None if metrics_port is None else (metrics_host, metrics_port)

        def run_child(number: int) -> int:
            server = Server(settings, metrics if number == 0 else None)
            if settings.health_port is not None:
                from lowkiq.health.http import serve_health

                serve_health(server, health_host, settings.health_port + number)
            return server.run()

        if processes == 1:
            exit_stopped(run_child(0))
        from lowkiq.clients.memory_policy import check_before_fork

        check_before_fork(settings.redis, settings.allow_eviction)
        from lowkiq.ownership.eviction import evict_on_death
        from lowkiq.runtime.supervisor import Supervisor

        exit_stopped(Supervisor(processes, run_child, on_death=evict_on_death(settings)).run())
    except LowkiqError as exc:
        fail(str(exc))


def exit_stopped(code: int) -> NoReturn:
    """Exit with ``code`` once the worker process has stopped.  The objects made so far
    are frozen first (``gc.freeze``), so the interpreter's teardown does not look through
    them for cycles: that took most of a second, a deploy's time, after "stopped" was
    logged.  Exit handlers still run."""
    gc.freeze()
    sys.exit(code)


_PAUSE_APP_HELP = "The app that defines WORKER: a .py file or a dotted module name."


@main.command()
@click.argument("worker_name", metavar="WORKER")
@require_option(_PAUSE_APP_HELP)
@embedded_redis_option()
def pause(worker_name: str, app: str) -> None:
    """Pause WORKER on every process: its shards take no new batches.

    WORKER is a class of the app's settings.workers. Running batches finish;
    enqueueing goes on and the jobs wait until `lowkiq resume`.
    """
    worker = _find_worker(app, worker_name)
    changed = _redis_call(worker.pause)
    click.echo(f"{worker.__name__} {'paused' if changed else 'was already paused'}")


@main.command()
@click.argument("worker_name", metavar="WORKER")
@require_option(_PAUSE_APP_HELP)
@embedded_redis_option()
def resume(worker_name: str, app: str) -> None:
    """Resume WORKER on every process (paused by `lowkiq pause` or the dashboard)."""
    worker = _find_worker(app, worker_name)
    changed = _redis_call(worker.resume)
    click.echo(f"{worker.__name__} {'resumed' if changed else 'was not paused'}")


@main.command("rate-limit")
@click.argument("worker_name", metavar="WORKER")
@click.argument("limit", required=False)
@require_option(_PAUSE_APP_HELP)
@click.option("--burst", type=click.IntRange(min=1), help="Jobs that may start at once.")
@embedded_redis_option()
def rate_limit(worker_name: str, limit: str | None, app: str, burst: int | None) -> None:
    """Show or change WORKER's rate limit on every process, without a restart.

    LIMIT is jobs per period (100/s, 100/1.5s, 6000/min, 10/h), `none` to lift
    the limit, or `code` to go back to the class's rate_limit.  Without LIMIT,
    show the limit in force.
    """
    from lowkiq.limits.rate_limit import RateLimit

    worker = _find_worker(app, worker_name)
    if limit is not None and limit not in ("none", "code"):
        try:
            parsed: RateLimit | None = RateLimit.parse(limit, burst)
        except LowkiqError as exc:
            fail(str(exc))
        _redis_call(lambda: worker.set_rate_limit(parsed))
    elif limit == "none":
        _redis_call(lambda: worker.set_rate_limit(None))
    elif limit == "code":
        _redis_call(worker.clear_rate_limit)
    status = _redis_call(worker.rate_limit_status)
    shown = "none" if status.limit is None else status.limit.describe()
    source = "set at run time" if status.overridden else "the class's"
    click.echo(
        f"{worker.__name__}: rate limit {shown} ({source}); waited for tokens {status.waited} times"
    )


@main.command()
@click.argument("worker_name", metavar="WORKER")
@require_option(_PAUSE_APP_HELP)
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    help="The new number of shards (omit it to see the queue's layout and progress).",
)
@embedded_redis_option()
def reshard(worker_name: str, app: str, shards: int | None) -> None:
    """Change WORKER's number of shards while jobs are enqueued and processed.

    New jobs go to the new shards at once; each old shard is then emptied into
    them, and a new shard runs jobs once its old shards are emptied, so no
    payload is lost, no id runs twice at a time and each id keeps its order.
    Progress is printed; an interrupted reshard goes on when the same command
    runs again.  Afterwards, set the class's shards_count to the new number.
    """
    from lowkiq.ownership import resharding

    worker = _find_worker(app, worker_name)
    queue = worker.queue()

    def run() -> bool:
        if shards is None:
            click.echo(resharding.status(queue))
            return True
        resharding.reshard(queue, shards, lambda progress: click.echo(str(progress)))
        click.echo(resharding.status(queue))
        return True

    try:
        _redis_call(run)
    except resharding.ReshardError as exc:
        fail(str(exc))
    static = _static_processes(worker)
    if static:
        click.echo(
            f"note: process(es) {', '.join(static)} deal shards with a static splitter and "
            f"do not follow a reshard: restart them"
        )
    if shards is not None and worker.shards_count != shards:
        click.echo(
            f"note: {worker.__name__}.shards_count is {worker.shards_count}; the queue's "
            f"layout in Redis ({shards}) is what counts from now on"
        )


def _static_processes(worker: type[Worker]) -> list[str]:
    """The live processes serving ``worker`` whose shards a static splitter gave out."""
    from lowkiq.ownership.status import processes

    return [
        f"{p.host}:{p.pid}"
        for p in processes().processes
        if p.mode == "static"
        and any(shard.startswith(f"{worker.queue_name}:") for shard in p.shards)
    ]


@main.group()
def redis() -> None:
    """Manage the project's embedded development Redis server (in ./.lowkiq/)."""


@redis.command()
@click.option(
    "--dir",
    "directory",
    default=PROJECT_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory of the embedded server.",
)
def stop(directory: str) -> None:
    """Stop the embedded Redis server; its data stays in the directory."""
    if stop_embedded(Path(directory)):
        click.echo(f"stopped the embedded Redis server in {Path(directory).resolve()}")
    else:
        click.echo(f"no embedded Redis server is running in {Path(directory).resolve()}")


def stop_embedded(directory: Path) -> bool:
    """Shut down the embedded server kept in ``directory``; ``False`` when none answers."""
    import redis as redis_client

    from lowkiq.clients.embedded import EmbeddedServer, socket_path

    directory = directory.resolve()
    url = f"unix://{socket_path(directory)}"
    try:
        redis_client.Redis.from_url(url, socket_timeout=2).ping()
    except (redis_client.RedisError, OSError):
        return False
    EmbeddedServer(url=url, directory=directory).stop()
    return True
