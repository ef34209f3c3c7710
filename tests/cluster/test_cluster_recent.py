"""The per-second counts of the last minutes on a Redis Cluster: written by the flush and
read by a fresh dashboard's live chart, each queue's keys in one slot."""

from __future__ import annotations

import html as html_module
import json
import re
import time

import redis

import lowkiq
from lowkiq.storage.queue import PoppedJob
from lowkiq.telemetry import recent
from lowkiq.telemetry.recorder import Recorder
from lowkiq_web import create_app
from tests.moved_clock import Clock


class Burst(lowkiq.Worker):
    shards_count = 3


class Quiet(lowkiq.Worker):
    shards_count = 3


def test_a_burst_is_read_per_second_on_a_cluster(cluster_client: redis.RedisCluster) -> None:
    lowkiq.settings.workers = [Burst, Quiet]
    start = int(time.time()) - 30
    clock = Clock(start + 0.5)
    recorder = Recorder(cluster_client, ["Burst", "Quiet"], clock=clock)
    jobs = [PoppedJob(f"j{n}", -1, ["p"], start) for n in range(100)]
    for second in range(3):
        clock.now = start + second + 0.5
        for _ in range(5):
            recorder.for_queue("Burst").performed(jobs, clock.now - 0.01, failed=second)
    recorder.for_queue("Quiet").performed(jobs[:3], clock.now - 0.01)
    recorder.flush()
    stored = recent.read(cluster_client, ["Burst", "Quiet"], start // 60, (start + 2) // 60)
    seconds = {s: c for by_second in stored.values() for s, c in by_second.items()}
    assert seconds[start] == recent.SecondCounts(500, 0)
    assert seconds[start + 2] == recent.SecondCounts(490 + 3, 10)
    page = create_app().test_client().get("/").get_data(as_text=True)
    found = re.search(r"<div id=\"live-chart-data\" hidden data-series='([^']*)'>", page)
    data = json.loads(html_module.unescape(found.group(1)))
    assert max(data["processed"]) >= 490  # per second, not the minute's average
