"""aperform_async on a Redis Cluster, a write per master from an event loop: a slot that
moved (MOVED), a slot being migrated (ASK) and a master that lost its scripts still
enqueue every job once; a call of one round runs one push per shard, on its master."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.aio.client import async_client, close_async_client
from tests.cluster.cluster_support import node_ids, private_cluster
from tests.conftest import lowkiq_on


class Spread(lowkiq.Worker):
    shards_count = 12


def test_aperform_async_follows_moved_and_ask_and_reloads_lost_scripts(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    try:
        with private_cluster(tmp_path, masters=2) as (_, admin):
            lowkiq.settings.workers = [Spread]
            queue = Spread.queue()
            enqueue = lambda ids: loop.run_until_complete(  # noqa: E731
                Spread.aperform_async([{"id": j} for j in ids])
            )
            enqueue([f"w{n}" for n in range(60)])  # the loop's client knows the slots
            assert Spread.metrics()["length"] == 60
            ids = node_ids(admin)

            # A shard's slot (of a fresh queue: empty) moves to the other master: MOVED.
            prefix = queue.keys.prefix(0)
            slot = admin.keyslot(prefix)
            source: Any = admin.get_node_from_key(prefix)
            target = next(n for n in admin.get_primaries() if n.name != source.name)
            for key in admin.scan_iter(match="*"):
                if admin.keyslot(key) == slot:
                    admin.delete(key)
            for node in admin.get_primaries():
                admin.execute_command(
                    "CLUSTER SETSLOT", slot, "NODE", ids[target.name], target_nodes=node
                )
            # And the other master lost its scripts: NOSCRIPT.
            admin.execute_command("SCRIPT FLUSH", target_nodes=target)
            moved = [f"m{n}" for n in range(60)]
            enqueue(moved)
            zero = [j for j in moved if queue.shard_of(j) == 0]
            assert zero
            on_target = admin.execute_command(
                "ZRANGE", queue.keys.perform_in_zset(0), 0, -1, target_nodes=target
            )
            assert {m.decode() for m in on_target} >= set(zero)

            # Now it migrates back, its keys not moved yet: the target answers ASK.
            loop.run_until_complete(_reload_slots())
            admin.execute_command(
                "CLUSTER SETSLOT", slot, "IMPORTING", ids[target.name], target_nodes=source
            )
            admin.execute_command(
                "CLUSTER SETSLOT", slot, "MIGRATING", ids[source.name], target_nodes=target
            )
            asked = [f"a{n}" for n in range(60)]
            enqueue(asked)
            on_source = source.redis_connection.pipeline(transaction=False)
            on_source.execute_command("ASKING")
            on_source.zrange(queue.keys.perform_in_zset(0), 0, -1)
            landed = {m.decode() for m in on_source.execute()[1]}
            assert landed == {j for j in asked if queue.shard_of(j) == 0}
            kept = [j for j in (f"w{n}" for n in range(60)) if queue.shard_of(j) != 0]
            every = kept + moved  # (the first jobs of shard 0 went with its emptied slot)
            assert len(Spread.queries().fetch(every)) == len(every)
            loop.run_until_complete(close_async_client())
    finally:
        loop.close()


async def _reload_slots() -> None:
    await (await async_client()).reload_slots()


def test_a_call_of_one_round_runs_one_push_per_shard_on_its_master(redis_cluster: Any) -> None:
    """Each master runs one ``EVALSHA`` per shard it serves: the push calls go to the
    master of their slot, none through the cluster client's redirections or again."""
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)) as admin:
        lowkiq.settings.workers = [Spread]

        async def one_call() -> dict[str, int]:
            await Spread.aperform_async([{"id": f"warm{n}"} for n in range(200)])
            before = _evalsha_by_master(admin)
            await Spread.aperform_async([{"id": n} for n in range(500)])
            after = _evalsha_by_master(admin)
            await close_async_client()
            return {name: after[name] - before[name] for name in after}

        calls = asyncio.run(one_call())
        queue = Spread.queue()
        shards_by_master: dict[str, int] = {}
        for shard in queue.shards:
            name = admin.get_node_from_key(queue.keys.prefix(shard)).name
            shards_by_master[name] = shards_by_master.get(name, 0) + 1
        assert calls == shards_by_master  # one EVALSHA per shard, on its master
        assert Spread.metrics()["length"] == 700


def _evalsha_by_master(admin: redis.RedisCluster) -> dict[str, int]:
    """Script calls per master: EVALSHA, or FCALL on Redis 7."""
    calls = {}
    for node in admin.get_primaries():
        stats = admin.info("commandstats", target_nodes=node)  # type: ignore[call-arg]
        names = ("cmdstat_evalsha", "cmdstat_fcall")
        calls[node.name] = sum(stats.get(name, {}).get("calls", 0) for name in names)
    return calls


def test_a_master_down_during_aperform_async_is_reported_job_by_job(tmp_path: Path) -> None:
    with private_cluster(tmp_path, masters=3) as (cluster, client):
        lowkiq.settings.workers = [Spread]
        queue = Spread.queue()
        layout_port = client.get_node_from_key(queue.keys.layout_hash).port
        lost = next(  # a shard on another master than the queue's layout, which stays readable
            shard
            for shard in queue.shards
            if client.get_node_from_key(queue.keys.prefix(shard)).port != layout_port
        )
        port = client.get_node_from_key(queue.keys.prefix(lost)).port
        dead = next(m for m in cluster.masters if m.url.endswith(f":{port}"))
        on_dead = {
            shard
            for shard in queue.shards
            if client.get_node_from_key(queue.keys.prefix(shard)).port == port
        }
        dead.stop()
        ids = [str(n) for n in range(60)]
        with pytest.raises(lowkiq.EnqueueIncomplete) as raised:
            asyncio.run(Spread.aperform_async([{"id": job_id} for job_id in ids]))
        error = raised.value
        assert sorted(error.enqueued + error.not_confirmed, key=int) == ids
        assert error.enqueued and error.not_confirmed
        assert {queue.shard_of(job_id) for job_id in error.not_confirmed} == on_dead
        for job_id in error.enqueued:
            shard = queue.shard_of(job_id)
            assert client.zscore(queue.keys.perform_in_zset(shard), job_id) is not None
        assert "not confirmed" in str(error) and "enqueueing them again is safe" in str(error)
