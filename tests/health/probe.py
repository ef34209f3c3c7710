"""Request a worker's health endpoints in tests: free ports, and GET with status and JSON."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any


def free_ports(count: int = 1) -> int:
    """The first of ``count`` consecutive TCP ports free on 127.0.0.1 now."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            first = int(sock.getsockname()[1])
        if first + count > 65536:
            continue
        try:
            for port in range(first + 1, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first


def get(port: int, path: str) -> tuple[int, bytes]:
    """``GET http://127.0.0.1:port/path``: status and body (0, b"" when nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError):
        return 0, b""


def verdict(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """The status and JSON document of ``/live`` or ``/ready`` (``{}`` when none answers)."""
    status, body = get(port, path)
    return status, json.loads(body) if status else {}
