"""The metrics history, the Metrics pages and ``/metrics`` on a Redis Cluster: each queue's
history keys share one hash tag, so each flush script touches one slot."""

from __future__ import annotations

import time

import redis
from prometheus_client.parser import text_string_to_metric_families

import lowkiq
from lowkiq.storage.queue import PoppedJob
from lowkiq.telemetry.recorder import Recorder
from lowkiq_web import create_app


class Orders(lowkiq.Worker):
    shards_count = 6


class Mail(lowkiq.Worker):
    shards_count = 2


def test_history_pages_and_prometheus_on_a_cluster(cluster_client: redis.RedisCluster) -> None:
    lowkiq.settings.workers = [Orders, Mail]
    recorder = Recorder(cluster_client, ["Orders", "Mail"])
    started = time.time() - 0.01
    for name, batches in (("Orders", 3), ("Mail", 2)):
        for _ in range(batches):
            recorder.for_queue(name).performed(
                [PoppedJob("a", -1, [1, 2], started)], started, False
            )
    assert recorder.flush() == 2
    history = lowkiq.history(60)
    assert history["Orders"].total.performs == 3 and history["Mail"].total.payloads == 4
    assert lowkiq.history(72 * 60)["Orders"].total.performs == 3
    client = create_app().test_client()
    assert client.get("/history?window=72h").status_code == 200
    assert client.get("/Orders/history?window=8h").status_code == 200
    text = client.get("/metrics").get_data(as_text=True)
    counts = {
        sample.labels["worker"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "lowkiq_job_duration_seconds_count"
    }
    assert counts == {"Orders": 3, "Mail": 2}
