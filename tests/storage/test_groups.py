"""Groups: inside a shard, due jobs are taken in turn across the groups their jobs
name (a tenant, an account), oldest first inside a group, so one group's backlog
does not hold up the others; an id keeps its group while it is queued."""

from __future__ import annotations

import time

import pytest
import redis
from storage_support import NOW, hot_layout, retry_in

import lowkiq
from lowkiq.errors import ConfigurationError, InvalidJob
from lowkiq.storage.queue import Queue
from tests.leasing import ack, fail, pop, restore


def enqueue(worker, group, ids, perform_in=NOW, **extra):
    """Jobs ``ids`` of ``group`` (``None``: none), due at ``perform_in`` (``None``: now)."""
    jobs = [{"id": job_id, "payload": job_id, **extra} for job_id in ids]
    if perform_in is not None:
        for job in jobs:
            job["perform_in"] = perform_in
    if group is not None:
        for job in jobs:
            job["group"] = group
    worker.perform_async(jobs)


def drain_order(queue, now=NOW, limit=1):
    """The ids popped one batch at a time (each acked by the next pop) until none is due."""
    order = []
    while True:
        batch = pop(queue, 0, limit, now=now)
        if batch is None:
            ack(queue, 0)
            continue
        if not batch:
            ack(queue, 0)
            return order
        order += [job.id for job in batch]
        ack(queue, 0)


def queued_groups(worker, ids):
    """The group of each queued job of ``ids`` (``None``: the default one), as the
    dashboard reads it."""
    return {job["id"]: job.get("group") for job in worker.queries().fetch(ids)}


def group_keys(redis_client, queue):
    """The names of the shard's group keys that exist."""
    keys = queue.keys
    names = {
        "turns": keys.group_turns_zset(0),
        "waits": keys.group_waits_zset(0),
        "of": keys.group_of_hash(0),
    }
    found = {name for name, key in names.items() if redis_client.exists(key)}
    found |= {key.decode() for key in redis_client.keys(keys.group_ids_zset(0, "*"))}
    return found


def test_a_later_group_is_not_held_up_by_an_earlier_groups_backlog(worker, queue):
    enqueue(worker, "A", [f"a{n}" for n in range(6)])
    enqueue(worker, "B", ["b0", "b1"])
    assert drain_order(queue) == ["a0", "b0", "a1", "b1", "a2", "a3", "a4", "a5"]


def test_without_groups_jobs_are_taken_by_perform_in_as_ever(worker, queue, redis_client):
    enqueue(worker, None, ["x2"], perform_in=NOW - 1)
    enqueue(worker, None, ["x1"], perform_in=NOW - 2)
    assert group_keys(redis_client, queue) == set()
    assert drain_order(queue) == ["x1", "x2"]


def test_a_shard_of_one_group_keeps_no_group_key_and_its_jobs_keep_their_group(
    worker, queue, redis_client
):
    enqueue(worker, "A", ["a0", "a1"])
    assert group_keys(redis_client, queue) == set()
    assert redis_client.get(queue.keys.group_base(0)) == b"A"
    assert queued_groups(worker, ["a0", "a1"]) == {"a0": "A", "a1": "A"}
    assert [row["name"] for row in worker.queries().groups()] == ["A"]
    assert [job.id for job in pop(queue, 0, 1, now=NOW)] == ["a0"]
    assert [job["group"] for job in worker.queries().processing_data()] == ["A"]
    ack(queue, 0)
    enqueue(worker, None, ["x0"])  # a second group: the shard is indexed
    assert group_keys(redis_client, queue) == {"turns", queue.keys.group_ids_zset(0, "A"),
                                               queue.keys.group_ids_zset(0, ""), "of"}  # fmt: skip
    assert queued_groups(worker, ["a1", "x0"]) == {"a1": "A", "x0": None}
    assert drain_order(queue) == ["a1", "x0"]


def test_a_shard_left_with_one_group_drops_its_group_keys_and_takes_turns_again(
    worker, queue, redis_client
):
    enqueue(worker, "A", [f"a{n}" for n in range(6)])
    enqueue(worker, "B", ["b0"])
    assert drain_order(queue, limit=2)[:2] == ["a0", "b0"]  # all of A's now
    assert group_keys(redis_client, queue) == set()
    enqueue(worker, "A", ["a6"])
    enqueue(worker, "C", ["c0", "c1"])
    assert drain_order(queue) == ["a6", "c0", "c1"]

    enqueue(worker, "A", ["a7"], perform_in=NOW - 2)
    enqueue(worker, "D", [f"d{n}" for n in range(4)], perform_in=NOW - 1)
    assert [job.id for job in pop(queue, 0, 2, now=NOW)] == ["a7", "d0"]
    ack(queue, 0)
    # D alone is left: it becomes the shard's group, and A's entry of it is gone.
    assert group_keys(redis_client, queue) == set()
    assert redis_client.get(queue.keys.group_base(0)) == b"D"
    assert queued_groups(worker, ["d1", "d3"]) == {"d1": "D", "d3": "D"}
    with pytest.raises(InvalidJob, match="queued in 'D'"):
        enqueue(worker, "A", ["d1"])
    enqueue(worker, None, ["x0"])
    assert drain_order(queue) == ["d1", "x0", "d2", "d3"]


def test_a_large_backlog_of_one_group_stays_indexed(worker, queue, redis_client):
    """More than 10,000 queued ids of one group keep their index: another group coming
    would otherwise index them all again, in one call."""
    enqueue(worker, "A", [f"a{n}" for n in range(10_001)])
    enqueue(worker, "B", ["b0"])
    assert [job.id for job in pop(queue, 0, 2, now=NOW)] == ["a0", "b0"]
    ack(queue, 0)
    assert "turns" in group_keys(redis_client, queue)
    assert queued_groups(worker, ["a1"]) == {"a1": "A"}


def test_jobs_without_a_group_take_their_turn_as_one_group(worker, queue, redis_client):
    enqueue(worker, None, [f"x{n}" for n in range(4)])
    enqueue(worker, "B", ["b0", "b1"])
    assert drain_order(queue) == ["x0", "b0", "x1", "b1", "x2", "x3"]
    assert group_keys(redis_client, queue) == set()  # nothing left behind


def test_oldest_first_inside_a_group(worker, queue):
    enqueue(worker, "A", ["late"], perform_in=NOW - 1)
    enqueue(worker, "A", ["early"], perform_in=NOW - 5)
    enqueue(worker, "B", ["b"], perform_in=NOW - 3)
    assert drain_order(queue) == ["early", "b", "late"]


def test_weights_give_a_group_more_turns(redis_client):
    class Weighted(lowkiq.Worker):
        shards_count = 1
        group_weights = {"A": 2}

    lowkiq.settings.workers = [Weighted]
    enqueue(Weighted, "A", [f"a{n}" for n in range(6)])
    enqueue(Weighted, "B", [f"b{n}" for n in range(3)])
    order = drain_order(Weighted.queue())
    assert order == ["a0", "b0", "a1", "a2", "b1", "a3", "a4", "b2", "a5"]


def test_a_batch_takes_jobs_in_turn_across_groups(worker, queue):
    enqueue(worker, "A", [f"a{n}" for n in range(5)])
    enqueue(worker, "B", ["b0", "b1"])
    enqueue(worker, "C", ["c0"])
    first = pop(queue, 0, 4, now=NOW)
    assert [job.id for job in first] == ["a0", "b0", "c0", "a1"]


def test_a_group_not_yet_due_waits_and_then_takes_its_turn(worker, queue):
    # The push reads Redis's clock: B's jobs are not due then, and A's are.
    later = time.time() + 3600
    enqueue(worker, "A", ["a0", "a1", "a2"])
    enqueue(worker, "B", ["b0", "b1"], perform_in=later)
    assert drain_order(queue, now=None, limit=1)[:1] == ["a0", "a1", "a2"][:1]
    # A was served (3 turns); B starts at the smallest turn, so it is not behind A's.
    enqueue(worker, "A", ["a3", "a4"])
    order = drain_order(queue, now=later + 1)
    assert order == ["a3", "b0", "a4", "b1"]


def test_another_group_for_a_queued_id_is_refused_and_nothing_of_the_call_is_written(
    sharded_worker, redis_client
):
    enqueue(sharded_worker, "A", ["order-1"])
    before = sorted(redis_client.keys("*"))
    jobs = [{"id": f"other-{n}", "group": "B"} for n in range(20)]
    jobs.append({"id": "order-1", "group": "B"})
    with pytest.raises(InvalidJob) as raised:
        sharded_worker.perform_async(jobs)
    assert raised.value.index == 20 and raised.value.field == "group"
    assert "'order-1' is queued in 'A'" in str(raised.value)
    assert sorted(redis_client.keys("*")) == before


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "one-group"])
@pytest.mark.parametrize("others", [20, 120])  # 120: each shard is first asked for its groups
def test_another_group_for_a_queued_id_is_refused_before_anything_of_the_call_is_written(
    sharded_worker, redis_client, indexed, others
):
    """A shard holding two groups looks the ids up; a shard of one group answers from
    its base group alone, and a call of 100 jobs or more asks it that first."""
    queue = sharded_worker.queue()
    enqueue(sharded_worker, "A", ["order-1"])
    if indexed:
        shard = queue.shard_of("order-1")
        neighbour = next(f"n{n}" for n in range(1000) if queue.shard_of(f"n{n}") == shard)
        enqueue(sharded_worker, "C", [neighbour])
    before = sorted(redis_client.keys("*"))
    jobs = [{"id": f"other-{n}", "group": "A"} for n in range(others)]
    jobs.append({"id": "order-1", "group": "B"})
    with pytest.raises(InvalidJob, match="'order-1' is queued in 'A'"):
        sharded_worker.perform_async(jobs)
    assert sorted(redis_client.keys("*")) == before
    sharded_worker.perform_async([*jobs[:-1], {"id": "order-1", "group": "A"}])
    assert queued_groups(sharded_worker, ["order-1", "other-3"]) == {
        "order-1": "A",
        "other-3": "A",
    }


def test_a_group_for_an_id_queued_without_one_is_refused(worker, queue):
    enqueue(worker, None, ["order-1"])
    with pytest.raises(InvalidJob, match="queued in the default group"):
        enqueue(worker, "A", ["order-1"])


def test_two_groups_for_one_id_in_one_call_are_refused(worker):
    with pytest.raises(InvalidJob, match="an earlier job of this call"):
        worker.perform_async([{"id": "x", "group": "A"}, {"id": "x", "group": "B"}])


@pytest.mark.parametrize("group", ["", b"A", True, object()])
def test_a_bad_group_is_refused(worker, group):
    with pytest.raises(InvalidJob) as raised:
        worker.perform_async([{"id": "x", "group": group}])
    assert raised.value.field == "group"


def test_a_job_without_a_group_joins_its_queued_ids_group(worker, queue):
    enqueue(worker, "A", ["a0", "a1"])
    enqueue(worker, "B", ["b0"])
    enqueue(worker, None, ["a0"], score=5)
    batch = pop(queue, 0, 3, now=NOW)
    assert [job.id for job in batch] == ["a0", "b0", "a1"]
    assert len(batch[0].payloads) == 1  # the same payload merged


def test_an_id_takes_another_group_once_it_left_the_queue(worker, queue):
    enqueue(worker, "A", ["x"])
    assert [job.id for job in pop(queue, 0, 1, now=NOW)] == ["x"]
    enqueue(worker, "B", ["x"])  # queued again while its batch runs: a new group
    ack(queue, 0)
    [running] = [job for job in pop(queue, 0, 1, now=NOW)]
    assert [job["group"] for job in worker.queries().processing_data()] == ["B"]
    assert running.id == "x"


def test_a_failed_job_is_retried_in_its_group(worker, queue, redis_client):
    enqueue(worker, "A", ["a0"])
    enqueue(worker, None, ["later"], perform_in=time.time() + 3600)  # two groups: indexed
    batch = pop(queue, 0, 1, now=NOW)
    fail(queue, 0, batch, "boom", retry_in, worker.max_retry_count, now=NOW)
    assert queued_groups(worker, ["a0"]) == {"a0": "A"}
    enqueue(worker, "B", ["b0", "b1"], perform_in=NOW + 5)
    # A's retry comes due after B is in the turns: A starts behind B, then they alternate.
    assert drain_order(queue, now=NOW + 10) == ["b0", "a0", "b1"]


def test_a_dead_job_keeps_its_group_and_queued_up_again_returns_to_it(redis_client, queue, worker):
    enqueue(worker, "A", ["a0"])
    for attempt in range(worker.max_retry_count + 1):
        batch = pop(queue, 0, 1, now=NOW + 100 * attempt)
        fail(queue, 0, batch, "boom", retry_in, worker.max_retry_count, now=NOW + 100 * attempt)
    assert redis_client.hget(queue.keys.morgue_group_of_hash(0), "a0") == b"A"
    assert group_keys(redis_client, queue) == set()
    worker.actions().morgue_queue_up(["a0"])
    assert queued_groups(worker, ["a0"]) == {"a0": "A"}
    assert not redis_client.exists(queue.keys.morgue_group_of_hash(0))


def test_a_restored_batch_returns_to_its_group(worker, queue, redis_client):
    enqueue(worker, "A", ["a0", "a1"])
    pop(queue, 0, 1, now=NOW)
    restore(queue, 0, now=NOW)
    assert queued_groups(worker, ["a0", "a1"]) == {"a0": "A", "a1": "A"}
    assert drain_order(queue) == ["a0", "a1"]


def test_deleting_and_killing_queued_jobs_leave_no_group_key(worker, queue, redis_client):
    enqueue(worker, "A", ["a0", "a1"])
    enqueue(worker, "B", ["b0"])
    worker.actions().delete(["a0"])
    worker.actions().kill(["b0"])
    assert redis_client.hget(queue.keys.morgue_group_of_hash(0), "b0") == b"B"
    worker.actions().clear()
    assert group_keys(redis_client, queue) == set()


def test_perform_now_brings_a_waiting_group_into_the_turns(worker, queue):
    enqueue(worker, "A", ["a0", "a1"], perform_in=None)
    enqueue(worker, "B", ["b0"], perform_in=time.time() + 3600)
    worker.actions().perform_now(["b0"])
    assert drain_order(queue, now=None) == ["a0", "b0", "a1"]


def test_a_hot_id_yields_inside_its_group(worker):
    with hot_layout(SPILL_PAYLOADS=2, BATCH_PAYLOADS=2):
        for n in range(5):  # one by one: the id turns hot (its payloads in a sorted set)
            worker.perform_async(
                [{"id": "hot", "group": "A", "payload": n, "score": n, "perform_in": NOW - 2}]
            )
        enqueue(worker, "A", ["a1"], perform_in=NOW - 1)
        enqueue(worker, "B", ["b0"], perform_in=NOW - 1)
        order = drain_order(worker.queue(), now=NOW + 1)  # the scripts of hot_layout
    assert order == ["hot", "b0", "a1", "hot", "hot"]


def test_group_weights_are_checked():
    with pytest.raises(ConfigurationError, match="group_weights"):

        class Bad(lowkiq.Worker):
            group_weights = {"A": 0}


def test_a_group_whose_next_job_was_put_off_leaves_the_turns_until_it_is_due(redis_client):
    class Debounced(lowkiq.Worker):
        shards_count = 1
        merge_perform_in = "latest"

    lowkiq.settings.workers = [Debounced]
    queue = Debounced.queue()
    later = time.time() + 3600
    enqueue(Debounced, "B", ["b0"], perform_in=None)
    enqueue(Debounced, "A", ["a0", "a1"], perform_in=None)
    enqueue(Debounced, "B", ["b0"], perform_in=later)  # b0 put off: B's turn is not due
    assert [job.id for job in pop(queue, 0, 3, now=None)] == ["a0", "a1"]
    ack(queue, 0)
    assert pop(queue, 0, 3, now=None) == []
    assert redis_client.zscore(queue.keys.group_waits_zset(0), "B") == pytest.approx(later)
    assert [job.id for job in pop(queue, 0, 3, now=later + 1)] == ["b0"]


def test_a_moved_job_keeps_its_group(worker, redis_client):
    class Target(lowkiq.Worker):
        shards_count = 1

    lowkiq.settings.workers = [worker, Target]
    enqueue(worker, "A", ["a0"])
    assert worker.actions().move(["a0"], to=Target) == 1
    assert queued_groups(Target, ["a0"]) == {"a0": "A"}


def test_the_push_itself_refuses_another_group_and_names_the_queued_one(worker, queue):
    enqueue(worker, "tenant 1 ünïcode", ["id with spaces"])
    with pytest.raises(InvalidJob, match="queued in 'tenant 1 ünïcode'"):
        enqueue(worker, "B", ["id with spaces"])  # one shard: no check before the push


def test_a_reshard_keeps_every_jobs_group_and_the_turns(sharded_worker, redis_client):
    from lowkiq.ownership.resharding import reshard

    enqueue(sharded_worker, "A", [f"a{n}" for n in range(12)])
    enqueue(sharded_worker, "B", [f"b{n}" for n in range(3)])
    enqueue(sharded_worker, None, ["x0"])
    queue = sharded_worker.queue()
    reshard(queue, 1)
    queue = sharded_worker.queue()
    [shard] = queue.shards
    assert queued_groups(
        sharded_worker, [*(f"a{n}" for n in range(12)), "b0", "b1", "b2", "x0"]
    ) == {
        **{f"a{n}": "A" for n in range(12)},
        **{f"b{n}": "B" for n in range(3)},
        "x0": None,
    }
    order = []
    while batch := pop(queue, shard, 1, now=NOW):
        order.append(batch[0].id)
        ack(queue, shard)
    assert sorted(order) == sorted([*(f"a{n}" for n in range(12)), "b0", "b1", "b2", "x0"])
    # The three groups take turns: B's and the default group's jobs are all in the
    # first rounds, not behind A's twelve.
    assert max(order.index(job_id) for job_id in ("b0", "b1", "b2", "x0")) < 8


def test_a_batch_passes_over_groups_whose_next_job_is_not_due(worker, queue):
    later = time.time() + 3600
    enqueue(worker, "A", ["a"], perform_in=None)
    enqueue(worker, "B", ["b"], perform_in=None)
    batch = pop(queue, 0, 2, now=None)
    enqueue(worker, "A", ["a"], perform_in=None)
    enqueue(worker, "A", ["a2"], perform_in=later)
    enqueue(worker, "B", ["b"], perform_in=None)
    enqueue(worker, "B", ["b2"], perform_in=later)
    enqueue(worker, "C", ["c0", "c1", "c2"], perform_in=None)
    enqueue(worker, "D", ["d1"], perform_in=None)
    # a and b go back as retries: A and B stay in the turns with nothing due.
    fail(queue, 0, batch, "boom", retry_in, worker.max_retry_count)
    assert [job.id for job in pop(queue, 0, 3, now=None)] == ["c0", "d1", "c1"]


def test_a_perform_async_override_sets_the_group_from_the_payload(redis_client):
    class Accounts(lowkiq.Worker):
        shards_count = 1

        @classmethod
        def perform_async(cls, jobs):
            super().perform_async([{**job, "group": job["payload"]["account"]} for job in jobs])

    lowkiq.settings.workers = [Accounts]
    Accounts.perform_async([{"id": "o1", "payload": {"account": "acme"}}])
    assert queued_groups(Accounts, ["o1"]) == {"o1": "acme"}


def test_a_group_given_one_job_at_a_time_gets_no_more_turns_than_with_a_backlog(redis_client):
    """The default group is given its next job each time its last one is popped, and
    A (weight 2) has a backlog: A still takes two turns for each of the default
    group's, as it would if the default group had queued them all at once."""

    class Weighted(lowkiq.Worker):
        shards_count = 1
        group_weights = {"A": 2}

    lowkiq.settings.workers = [Weighted]
    queue = Weighted.queue()
    enqueue(Weighted, "A", [f"a{n}" for n in range(8)])
    enqueue(Weighted, None, ["x0"])
    order = []
    for n in range(1, 10):
        [job] = pop(queue, 0, 1, now=NOW)
        order.append(job.id)
        ack(queue, 0)
        if job.id.startswith("x"):
            enqueue(Weighted, None, [f"x{n}"])
    assert order == ["a0", "x0", "a1", "a2", "x2", "a3", "a4", "x5", "a5"]


def weighted_worker() -> tuple[type[lowkiq.Worker], Queue]:
    """A one-shard worker whose group A weighs 2 and B 0.5, registered, and its queue."""

    class Weighted(lowkiq.Worker):
        shards_count = 1
        group_weights = {"A": 2, "B": 0.5}

    lowkiq.settings.workers = [Weighted]
    return Weighted, Weighted.queue()


def test_a_group_back_with_due_work_is_not_ahead_of_a_group_it_was_served_before(redis_client):
    """A waits all along; the default group is served and has nothing more queued
    while B, not served yet, has the smallest turn.  Given a job then, the default
    group does not start just after B's turn, ahead of A: it goes on from its own."""

    Weighted, queue = weighted_worker()
    enqueue(Weighted, "A", ["a0", "a1", "a2"])

    def pop_one():
        [job] = pop(queue, 0, 1, now=NOW)
        ack(queue, 0)
        return job.id

    assert pop_one() == "a0"
    enqueue(Weighted, None, ["x0"])
    enqueue(Weighted, "B", ["b0", "b1"])  # both just after A's turn; "" sorts first
    assert [pop_one(), pop_one()] == ["a1", "x0"]
    enqueue(Weighted, None, ["x1"])
    # A's turn came before the default group's second one: B, then A, then x1.
    assert [pop_one(), pop_one(), pop_one()] == ["b0", "a2", "x1"]


def test_a_failed_job_merging_into_its_queued_id_keeps_its_groups_turn(redis_client):
    """B's only job fails while the same id is queued again: the retry merges into the
    queued job (SPEC §3 rule 3), and B, which never left the queue, keeps the turn it
    had instead of starting again just after the smallest one, ahead of A."""

    Weighted, queue = weighted_worker()
    enqueue(Weighted, "A", ["a0", "a1", "a2"])
    assert [job.id for job in pop(queue, 0, 1, now=NOW)] == ["a0"]
    ack(queue, 0)
    enqueue(Weighted, "B", ["b"])
    enqueue(Weighted, "C", ["c0", "c1"])
    assert [job.id for job in pop(queue, 0, 1, now=NOW)] == ["a1"]
    ack(queue, 0)
    batch = pop(queue, 0, 1, now=NOW)
    assert [job.id for job in batch] == ["b"]
    enqueue(Weighted, "B", ["b"])
    fail(queue, 0, batch, "boom", retry_in, Weighted.max_retry_count, now=NOW)
    assert drain_order(queue, now=NOW + 10) == ["c0", "a2", "c1", "b"]


def redis_commands(client):
    """Commands the server (every master of a cluster) has run, scripts' own included,
    INFO not counted."""
    if isinstance(client, redis.RedisCluster):
        infos = list(client.info("commandstats", target_nodes=client.PRIMARIES).values())
    else:
        infos = [client.info("commandstats")]
    return sum(s["calls"] for info in infos for name, s in info.items() if name != "cmdstat_info")


def test_groups_kept_with_nothing_queued_are_passed_over_a_chunk_at_a_time(
    worker, queue, redis_client
):
    """300 groups of one job each are served after A's first job, each keeping its turn
    behind A's; the pop whose turn they reach passes over them a chunk at a time (not
    two reads a group), and they leave the turns."""
    enqueue(worker, "A", ["a0", "a1", "a2"])
    jobs = [{"id": f"j{n}", "group": f"g{n:03}", "perform_in": NOW} for n in range(300)]
    worker.perform_async(jobs)
    enqueue(worker, "Z", ["z"], perform_in=time.time() + 3600)  # the queue does not empty
    order, costs = [], []
    while True:
        before = redis_commands(redis_client)
        batch = pop(queue, 0, 1, now=NOW)
        costs.append(redis_commands(redis_client) - before)
        ack(queue, 0)
        if not batch:
            break
        order.append(batch[0].id)
    assert order == ["a0", *(f"j{n}" for n in range(300)), "a1", "a2"]
    assert max(costs) < 40, costs
    assert redis_client.zrange(queue.keys.group_turns_zset(0), 0, -1) == []
    assert redis_client.zrange(queue.keys.group_waits_zset(0), 0, -1) == [b"Z"]


def test_a_grouped_pop_runs_one_more_command_with_one_group_and_five_with_two(
    worker, queue, redis_client
):
    """SPEC §14's cost of groups, in commands: a one-job pop of a shard whose jobs are all
    of one group runs 1 more Redis command than one without groups (its base group is
    read), 5 while two groups take turns (a group that runs out of due jobs costs one
    more, once)."""

    def pop_cost() -> int:
        before = redis_commands(redis_client)
        assert len(pop(queue, 0, 1, now=NOW)) == 1
        cost = redis_commands(redis_client) - before
        ack(queue, 0)
        return cost

    enqueue(worker, None, ["u0", "u1", "u2"])
    pop_cost()  # the first pop takes the shard's lease
    plain = [pop_cost() for _ in range(2)]
    enqueue(worker, "A", [f"a{n}" for n in range(6)])
    lone = [pop_cost() for _ in range(2)]
    enqueue(worker, "B", [f"b{n}" for n in range(4)])
    two = [pop_cost() for _ in range(4)]  # neither group runs out of due jobs
    assert (plain, lone, two) == ([plain[0]] * 2, [plain[0] + 1] * 2, [plain[0] + 5] * 4)
