"""A job that kills its process must not take the jobs of its thread's other shards to
the morgue with it: they did not kill anything.

Found by bench/chaos.py (a healthy id in the morgue with "the process died running this
job 3 times"): a thread pops all its shards in one round, so when ``perform`` of the
poison job ended the process, the batches popped with it in that round (run or not yet
run: a run batch's ack waits for its shard's next pop) were still in their shards'
processing areas, and every death of the poison job counted against them too.  A job
with a death counted now runs alone (lowkiq.runtime.suspects).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from tests.apps.runner import WorkerProcess, eventually


def test_the_jobs_of_other_shards_popped_with_a_poison_job_are_not_buried(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    queue = recorder.queue()
    poison_shard = queue.shard_of("poison")
    good = next(f"good{n}" for n in range(100) if queue.shard_of(f"good{n}") != poison_shard)
    recorder.perform_async(
        [{"id": "poison", "payload": {"exit": True}}, {"id": good, "payload": {"v": 1}}]
    )
    env = {"TEST_SHARDS": "2", "TEST_LEASE_TTL": "0.5", "LOWKIQ_THREADS_PER_NODE": "1"}

    # One thread serves both shards and pops them together.
    drain_replacing_the_dead(workers, recorder, env)

    dead = [job["id"] for job in recorder.queries().morgue_range_by_id("-", "+")]
    assert dead == ["poison"]
    assert redis_client.lrange(f"test:seen:{good}", 0, -1) == [b"1"]


def test_the_jobs_popped_with_a_poison_job_under_a_rate_limit_are_not_buried(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    # Under a rate limit, after its first batch a pop of the poison job's shard takes
    # several batches, so the goods around the poison job are in the processing area
    # when it kills the process, and are restored with it.
    queue = recorder.queue()
    shard = queue.shard_of("poison")
    goods = [f"good{n}" for n in range(200) if queue.shard_of(f"good{n}") == shard][:6]
    now = time.time()
    jobs = [
        {"id": job_id, "payload": {"v": 1}, "perform_in": now - 60 + n}
        for n, job_id in enumerate(goods)
    ]
    jobs.append({"id": "poison", "payload": {"exit": True}, "perform_in": now - 60 + 2.5})
    recorder.perform_async(jobs)
    env = {"TEST_LEASE_TTL": "0.5", "TEST_RATE": "1000"}

    drain_replacing_the_dead(workers, recorder, env)

    dead = [job["id"] for job in recorder.queries().morgue_range_by_id("-", "+")]
    assert dead == ["poison"]
    for job_id in goods:
        assert set(redis_client.lrange(f"test:seen:{job_id}", 0, -1)) == {b"1"}, job_id


def drain_replacing_the_dead(
    workers: Callable[..., WorkerProcess], recorder: type, env: dict[str, str]
) -> None:
    """Run worker processes until one drains the queue, starting a new one whenever the
    poison job ends one (as a supervisor or an orchestrator would), up to four."""

    def ended_or_drained(worker: WorkerProcess) -> bool:
        metrics = recorder.metrics()
        return worker.process.poll() is not None or not metrics["busy"] + metrics["length"]

    for _ in range(4):
        worker = workers(wait=False, **env)
        eventually(lambda: ended_or_drained(worker), timeout=30)  # noqa: B023
        if worker.process.poll() is None:
            return
        assert worker.process.returncode == 3, worker.output()  # ended by the poison job
