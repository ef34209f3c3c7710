"""``lowkiq worker --health-port``: /live, /ready and /metrics served by real worker
processes, through quiet, a Redis outage and a ``perform`` that hangs."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

import lowkiq
from lowkiq.clients.embedded import redis_server_binary, start_server
from tests.apps.runner import WorkerProcess, eventually
from tests.health.probe import free_ports, get, verdict

Start = Callable[..., WorkerProcess]


def health_args(port: int) -> tuple[str, ...]:
    return ("--health-port", str(port), "--health-host", "127.0.0.1")


def ready(port: int) -> dict:
    status, document = verdict(port, "/ready")
    return document if status == 200 else {}


def test_live_ready_and_metrics_answer_and_quiet_takes_the_process_out_of_ready(
    workers: Start, recorder: type, redis_client: redis.Redis
) -> None:
    port = free_ports()
    worker = workers("--threads", "2", *health_args(port))
    document = eventually(lambda: (found := ready(port)) and len(found["shards"]) == 5 and found)
    assert document["ok"] and document["reason"] == "" and document["registered"]
    assert [thread["name"] for thread in document["threads"]] == [
        "dispatcher",
        "thread 0",
        "thread 1",
    ]
    assert document["pid"] == worker.process.pid
    status, alive = verdict(port, "/live")
    assert status == 200 and alive["ok"] and alive["process_id"] == document["process_id"]

    recorder.perform_async([{"id": "a", "payload": {"v": 1}}])
    eventually(lambda: redis_client.lrange("test:seen:a", 0, -1) == [b"1"])
    status, body = get(port, "/metrics")
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert status == 200 and "lowkiq_queue_length" in names
    assert get(port, "/nothing")[0] == 404
    head = urllib.request.Request(f"http://127.0.0.1:{port}/live", method="HEAD")
    with urllib.request.urlopen(head, timeout=5) as response:
        assert response.status == 200 and response.read() == b""
    post = urllib.request.Request(f"http://127.0.0.1:{port}/ready", data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=5)
    assert refused.value.code == 405

    assert lowkiq.command_process(document["process_id"], "quiet")
    status, unready = eventually(lambda: (found := verdict(port, "/ready"))[0] == 503 and found)
    assert unready["reason"].startswith("quiet") and unready["quiet"]
    eventually(lambda: verdict(port, "/ready")[1]["shards"] == [])
    assert verdict(port, "/live")[0] == 200

    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_while_redis_is_down_the_process_is_live_but_not_ready(
    workers: Start, tmp_path: Path
) -> None:
    binary = redis_server_binary(prefer_path=True)
    server = start_server(tmp_path / "redis", binary=binary)
    port = free_ports()
    try:
        worker = workers(*health_args(port), REDIS_URL=server.url)
        eventually(lambda: ready(port))
        server.stop()
        status, down = eventually(lambda: (found := verdict(port, "/ready"))[0] == 503 and found)
        assert "Redis does not answer the heartbeat" in down["reason"], down
        # Over several backoffs of the threads and the coordinator, /live stays 200.
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            status, alive = verdict(port, "/live")
            assert status == 200 and alive["coordinator"]["failures"] >= 1, alive
            time.sleep(0.5)
        server = start_server(tmp_path / "redis", binary=binary)
        eventually(lambda: ready(port), timeout=30)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        server.stop()


def test_a_perform_past_stuck_after_makes_the_process_not_live(
    workers: Start, recorder: type, redis_client: redis.Redis
) -> None:
    port = free_ports()
    # The port and the threshold from the environment this time.
    workers(LOWKIQ_HEALTH_PORT=str(port), LOWKIQ_STUCK_AFTER="1")
    eventually(lambda: ready(port))
    recorder.perform_async([{"id": "slow", "payload": {"sleep": 3}}])
    status, stuck = eventually(lambda: (found := verdict(port, "/live"))[0] == 503 and found)
    shard = recorder.queue().shard_of("slow")
    assert f"in perform of Recorder:{shard} for" in stuck["reason"], stuck
    assert "(stuck_after 1s)" in stuck["reason"] and stuck["busy"] == 1
    assert verdict(port, "/ready")[1]["reason"].startswith("not live: thread")
    eventually(lambda: redis_client.lrange("test:finished", 0, -1) == [b"slow"])
    eventually(lambda: verdict(port, "/live")[0] == 200)


def test_with_processes_each_process_serves_its_own_port(workers: Start, recorder: type) -> None:
    port = free_ports(2)
    worker = workers("--processes", "2", *health_args(port))
    first, second = (eventually(lambda p=p: ready(p)) for p in (port, port + 1))
    assert first["process_id"] != second["process_id"]
    assert {first["pid"], second["pid"]}.isdisjoint({worker.process.pid})
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_health_port_in_use_is_a_one_line_error(workers: Start, recorder: type) -> None:
    port = free_ports()
    with __import__("socket").socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        worker = workers(*health_args(port), wait=False)
        assert worker.wait() == 2
    assert f"Error: cannot serve health on 127.0.0.1:{port}" in worker.output()
