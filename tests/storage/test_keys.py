"""Redis Cluster readiness: every key of a shard carries the tag ``{queue_name:shard}``, and
every key of an id is in the shard of that id."""

from __future__ import annotations

import time

from redis.crc import key_slot
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
    worker.perform_async([{"id": "future", "perform_in": NOW + 10**9}])
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


def test_every_key_of_every_operation_carries_its_shards_hash_tag(redis_client):
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
        by_tag.setdefault(tag, set()).add(key)
    expected_tags = {f"OrderWorker:{shard}" for shard in range(4)} | {"mail:0"}
    layouts = {"OrderWorker:layout", "mail:layout"}  # each queue's layout, a slot of its own
    assert set(by_tag) == expected_tags | layouts
    assert by_tag["mail:layout"] == {QueueKeys("mail").layout_hash}

    for worker in (OrderWorker, MailWorker):
        queue = worker.queue()
        for shard in range(worker.shards_count):
            names = QueueKeys(queue.name)
            expected = {
                names.fresh_lex_zset(shard),
                names.retry_lex_zset(shard),
                names.retry_count_zset(shard),
                names.errors_hash(shard),
                names.morgue_lex_zset(shard),
                names.morgue_updated_at_zset(shard),
                names.morgue_errors_hash(shard),
                names.processed_counter(shard),
                names.failed_counter(shard),
                names.perform_in_zset(shard),
                names.processing_hash(shard),
                names.lease(shard),
                names.epoch_counter(shard),
            }
            tagged = by_tag[f"{queue.name}:{shard}"]
            assert expected <= tagged, expected - tagged
            # The wake list, and the batch counter once the shard took a batch.
            others = {names.wake_list(shard), names.batch_counter(shard)}
            for key in tagged - expected - others:  # per-id keys
                job_id = key.rsplit(":", 1)[1]
                assert queue.shard_of(job_id) == shard, key


def test_the_keys_of_a_shard_share_one_cluster_slot_and_shards_spread():
    keys = QueueKeys("OrderWorker")
    slots = set()
    for shard in range(8):
        names = [
            keys.fresh_lex_zset(shard),
            keys.retry_lex_zset(shard),
            keys.retry_count_zset(shard),
            keys.errors_hash(shard),
            keys.morgue_lex_zset(shard),
            keys.morgue_updated_at_zset(shard),
            keys.morgue_errors_hash(shard),
            keys.processed_counter(shard),
            keys.failed_counter(shard),
            keys.perform_in_zset(shard),
            keys.processing_hash(shard),
            keys.wake_list(shard),
            keys.lease(shard),
            keys.epoch_counter(shard),
            keys.payloads_zset(shard, "some id"),
            keys.morgue_payloads_zset(shard, "some id"),
        ]
        assert len(set(names)) == len(names)
        shard_slots = {key_slot(name.encode()) for name in names}
        assert len(shard_slots) == 1
        slots |= shard_slots
    assert len(slots) == 8
