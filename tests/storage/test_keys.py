"""Redis Cluster readiness (SPEC §10): every key of a queue carries the tag ``{queue_name}``."""

from __future__ import annotations

import time

from storage_support import NOW

import lowkiq
from lowkiq.storage.keys import QueueKeys
from tests.leasing import ack, fail, pop, restore


def exercise(worker: type[lowkiq.Worker]) -> None:
    """Run every write, read and action on ``worker``'s queue, leaving every structure filled."""
    queue, actions = worker.queue(), worker.actions()
    shards = range(worker.shards_count)

    def fail_each_shard(max_retry_count: int) -> None:
        worker.perform_async([{"id": n, "payload": {"n": n}, "perform_in": NOW} for n in range(20)])
        for shard in shards:
            if batch := pop(queue, shard, 5, now=NOW):
                fail(queue, shard, batch, "e", lambda c: 1, max_retry_count, now=NOW)

    fail_each_shard(max_retry_count=0)  # the morgue
    fail_each_shard(max_retry_count=5)  # retries
    actions.kill_all_failed_jobs()
    actions.morgue_queue_up(["1"])
    actions.morgue_delete(["2"])
    fail_each_shard(max_retry_count=5)
    worker.perform_async([{"id": "future", "perform_in": NOW + 10**10}])
    actions.perform_all_jobs_now()  # every job is due at the real now
    later = time.time() + 5
    for shard in shards:
        pop(queue, shard, 2, now=later)
        ack(queue, shard)
        pop(queue, shard, 1, now=later)
        restore(queue, shard, now=later)
        pop(queue, shard, 1, now=later)  # left running
    worker.perform_async([{"id": f"fresh{n}"} for n in range(10)])
    worker.metrics()
    queries = worker.queries()
    queries.range_by_id("-", "+")
    queries.range_by_perform_in("-inf", "+inf")
    queries.morgue_range_by_updated_at("-inf", "+inf")
    queries.processing_data()


def test_every_key_of_every_operation_carries_the_queue_hash_tag(redis_client):
    class OrderWorker(lowkiq.Worker):
        shards_count = 4
        batch_size = 5

    class MailWorker(lowkiq.Worker):
        shards_count = 1
        queue_name = "mail"

    lowkiq.settings.workers = [OrderWorker, MailWorker]
    exercise(OrderWorker)
    exercise(MailWorker)
    lowkiq.stats()

    keys = [key.decode() for key in redis_client.scan_iter(count=1000)]
    by_tag: dict[str, set[str]] = {}
    for key in keys:
        assert "{" in key and "}" in key, f"{key} has no hash tag"
        tag = key[key.index("{") + 1 : key.index("}")]
        assert tag in ("OrderWorker", "mail"), f"{key} has the hash tag {tag!r}"
        by_tag.setdefault(tag, set()).add(key)

    for tag in ("OrderWorker", "mail"):
        names = QueueKeys(tag)
        expected = {
            names.fresh_lex_zset,
            names.retry_lex_zset,
            names.retry_count_zset,
            names.errors_hash,
            names.morgue_lex_zset,
            names.morgue_updated_at_zset,
            names.morgue_errors_hash,
            names.processed_counter,
            names.failed_counter,
            names.perform_in_zset(0),
            names.processing_hash(0),
        }
        assert expected <= by_tag[tag], expected - by_tag[tag]


def test_queue_keys_share_one_cluster_slot(redis_client):
    keys = QueueKeys("OrderWorker")
    names = [
        keys.fresh_lex_zset,
        keys.retry_lex_zset,
        keys.retry_count_zset,
        keys.errors_hash,
        keys.morgue_lex_zset,
        keys.morgue_updated_at_zset,
        keys.morgue_errors_hash,
        keys.processed_counter,
        keys.failed_counter,
        *(keys.perform_in_zset(shard) for shard in range(3)),
        *(keys.processing_hash(shard) for shard in range(3)),
    ]
    assert len(set(names)) == len(names)
    assert {name[name.index("{") : name.index("}") + 1] for name in names} == {"{OrderWorker}"}
