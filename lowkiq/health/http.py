"""The health endpoints a ``lowkiq worker`` process serves on its health port.

``GET /live`` and ``GET /ready`` answer 200 or 503 with a JSON body (the
verdict's reason and facts, see :mod:`lowkiq.health.verdicts`), computed from
the process's heartbeats without a Redis call; ``GET /metrics`` is the
installation's Prometheus exposition (:mod:`lowkiq.telemetry.prometheus`, read
from Redis, like ``--metrics-port``).  The server runs on daemon threads of
the worker process and ends with it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis

from lowkiq.errors import ConfigurationError
from lowkiq.health.heartbeats import Heartbeats
from lowkiq.health.verdicts import Limits, ProcessState, Verdict, live, ready
from lowkiq.settings import Settings
from lowkiq.telemetry import prometheus

log = logging.getLogger("lowkiq.health")

#: The paths the health port serves.
PATHS = ("/live", "/ready", "/metrics")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
TEXT = "text/plain; charset=utf-8"


class Probed(Protocol):
    """What the health endpoints read of a worker process (its server is one)."""

    @property
    def health(self) -> Heartbeats:
        """The heartbeats its loops stamp."""

    @property
    def settings(self) -> Settings:
        """The settings it runs with (limits, and the Redis ``/metrics`` reads)."""

    def process_state(self) -> ProcessState:
        """What it knows of itself now: shards held, busy batches, quiet, stopping."""


class HealthApp:
    """The WSGI application of one worker process's health port."""

    def __init__(self, process: Probed) -> None:
        self.process = process

    def verdict(self, path: str) -> Verdict:
        """The verdict of ``/live`` or ``/ready`` now."""
        process = self.process
        check = live if path == "/live" else ready
        return check(process.health, process.process_state(), Limits.of(process.settings))

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method in ("GET", "HEAD"):
            path, accept = environ.get("PATH_INFO", ""), environ.get("HTTP_ACCEPT", "")
            status, body, content_type = self.answer(path, accept)
        else:
            status, body, content_type = "405 Method Not Allowed", b"GET only\n", TEXT
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        start_response(status, headers)
        return [] if method == "HEAD" else [body]

    def answer(self, path: str, accept: str) -> tuple[str, bytes, str]:
        """The status, body and content type of ``GET path``."""
        if path in ("/live", "/ready"):
            verdict = self.verdict(path)
            body = json.dumps(verdict.document(), indent=1).encode() + b"\n"
            status = "200 OK" if verdict.ok else "503 Service Unavailable"
            return status, body, "application/json"
        if path == "/metrics":
            try:
                body, content_type = prometheus.render(accept, self.process.settings)
            except redis.RedisError as exc:
                message = f"Redis did not answer: {type(exc).__name__}: {exc}\n"
                return "503 Service Unavailable", message.encode(), TEXT
            return "200 OK", body, content_type
        return "404 Not Found", f"serves {', '.join(PATHS)}\n".encode(), TEXT


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes come every few seconds: no access log."""


def serve_health(process: Probed, host: str, port: int) -> WSGIServer:
    """Serve ``process``'s health endpoints on ``host:port`` from a daemon thread, from now
    until the process exits (they answer while it waits for Redis, too)."""
    try:
        httpd = make_server(host, port, HealthApp(process), _ThreadingServer, _QuietHandler)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve health on {host}:{port}: {exc}") from exc
    thread = threading.Thread(target=httpd.serve_forever, name="lowkiq-health", daemon=True)
    thread.start()
    log.info("health on http://%s:%d (%s)", host, port, " ".join(PATHS))
    return httpd
