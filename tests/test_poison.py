"""A job that kills its process (``os._exit`` in ``perform``) under the supervisor: the
restarted children run the shard's other jobs, and after ``max_restores`` deaths the job
goes to the morgue with ``retries_exhausted`` called; no crash loop."""

from __future__ import annotations

import signal
from collections.abc import Callable

import redis

from tests.apps.runner import WorkerProcess, eventually


def test_a_job_that_kills_its_process_goes_to_the_morgue_and_the_shard_goes_on(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    queue = recorder.queue()
    shard = queue.shard_of("poison")
    good = [f"good{n}" for n in range(200) if queue.shard_of(f"good{n}") == shard][:20]
    recorder.perform_async(
        [{"id": "poison", "payload": {"exit": True}}]
        + [{"id": job_id, "payload": {"v": 1}} for job_id in good]
    )
    supervisor = workers("--processes", "2", wait=False, TEST_BATCH="5", TEST_LEASE_TTL="0.5")

    def finished() -> set[str]:
        return {item.decode() for item in redis_client.lrange("test:finished", 0, -1)}

    eventually(lambda: finished() == set(good), timeout=60)
    eventually(lambda: redis_client.lrange("test:exhausted", 0, -1) == [b"poison"], timeout=30)
    dead = recorder.queries().morgue_range_by_id("-", "+")
    assert [job["id"] for job in dead] == ["poison"]
    assert "died running this job 3 times" in dead[0]["error"]
    started = [item.decode() for item in redis_client.lrange("test:started", 0, -1)]
    assert started.count("poison") == 3  # run 3 times, then never again
    metrics = recorder.metrics()
    assert (metrics["length"], metrics["busy"], metrics["morgue_length"]) == (0, 0, 1)
    assert supervisor.process.poll() is None  # the supervisor goes on, no crash loop
    assert "died running this job 3 times" in supervisor.output()  # logged by the new owner
    supervisor.signal(signal.SIGTERM)
    supervisor.wait()
