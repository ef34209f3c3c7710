"""Operating one group at run time (``Worker.actions()``): pause and resume, delete its
queued jobs, its own cap and rate, and a read of its state; bad input raises and changes
nothing.  On one server and on a Redis Cluster (every storage test runs on both)."""

from __future__ import annotations

import pytest
import redis

import lowkiq
from lowkiq.errors import InvalidQuery
from lowkiq.storage.group_actions import GroupState, UnknownGroup
from lowkiq.storage.group_claims import GroupClaims
from lowkiq.storage.group_limits import limits_key
from tests.leasing import ack, pop


class Tenants(lowkiq.Worker):
    """Four shards: a group's jobs spread over them, some shards indexed, some not."""

    shards_count = 4
    batch_size = 5


@pytest.fixture
def tenants(redis_client: redis.Redis) -> type[lowkiq.Worker]:
    lowkiq.settings.workers = [Tenants]
    return Tenants


def enqueue(worker: type[lowkiq.Worker], group: str | None, ids: list[str]) -> None:
    jobs = [{"id": i, "payload": i} for i in ids]
    for job in jobs:
        if group is not None:
            job["group"] = group
    worker.perform_async(jobs)


def stored(redis_client: redis.Redis, worker: type[lowkiq.Worker]) -> dict[bytes, bytes]:
    return redis_client.hgetall(limits_key(worker.queue().keys))


def test_pause_and_resume_are_stored_and_read_back(
    tenants: type[lowkiq.Worker], redis_client: redis.Redis
) -> None:
    enqueue(tenants, "acme", [f"a{n}" for n in range(7)])
    actions = tenants.actions()
    assert actions.pause_group("acme") is True
    assert actions.pause_group("acme") is False  # already paused
    state = actions.group_state("acme")
    assert state == GroupState(True, None, None, "acme", 7, 0)
    assert actions.group_settings()["acme"].paused
    assert actions.resume_group("acme") is True
    assert actions.resume_group("acme") is False
    assert actions.group_state("acme").paused is False
    assert stored(redis_client, tenants) == {}


def test_an_unknown_group_is_refused_and_nothing_is_written(
    tenants: type[lowkiq.Worker], redis_client: redis.Redis
) -> None:
    enqueue(tenants, "acme", ["a1"])
    actions = tenants.actions()
    for act in (
        lambda: actions.pause_group("nobody"),
        lambda: actions.resume_group("nobody"),
        lambda: actions.delete_group("nobody"),
        lambda: actions.group_limits("nobody", concurrency=2),
        lambda: actions.clear_group_limits("nobody"),
        lambda: actions.group_state("nobody"),
    ):
        with pytest.raises(UnknownGroup, match="no group 'nobody'"):
            act()
    assert stored(redis_client, tenants) == {}


@pytest.mark.parametrize("bad", [None, "", b"acme", True, "a\0b"])
def test_a_bad_group_name_is_refused(tenants: type[lowkiq.Worker], bad: object) -> None:
    with pytest.raises(InvalidQuery, match="group"):
        tenants.actions().pause_group(bad)


@pytest.mark.parametrize(
    "settings",
    [
        {"concurrency": 0},
        {"concurrency": -1},
        {"concurrency": True},
        {"concurrency": "3"},
        {"concurrency": 2.5},
        {"rate": "10/s"},
        {"rate": 10},
        {"concurrency": 2, "rate": "10/s"},  # one bad value: nothing of the call is written
    ],
)
def test_bad_limits_are_refused_and_change_nothing(
    tenants: type[lowkiq.Worker], redis_client: redis.Redis, settings: dict[str, object]
) -> None:
    enqueue(tenants, "acme", ["a1"])
    with pytest.raises(InvalidQuery, match="concurrency|rate"):
        tenants.actions().group_limits("acme", **settings)  # type: ignore[arg-type]
    assert stored(redis_client, tenants) == {}


def test_a_groups_own_limits_are_set_kept_and_cleared(tenants: type[lowkiq.Worker]) -> None:
    enqueue(tenants, "acme", ["a1"])
    actions = tenants.actions()
    rate = lowkiq.RateLimit(10, per=2.0, burst=3)
    state = actions.group_limits("acme", concurrency=2, rate=rate)
    assert (state.concurrency, state.rate) == (2, rate)
    state = actions.group_limits("acme", concurrency=5)  # rate=None leaves the rate
    assert (state.concurrency, state.rate) == (5, rate)
    assert actions.clear_group_limits("acme", rate=False) is True
    assert (actions.group_state("acme").concurrency, actions.group_state("acme").rate) == (
        None,
        rate,
    )
    assert actions.clear_group_limits("acme") is True
    assert actions.clear_group_limits("acme") is False
    assert actions.group_settings() == {}


def test_a_group_with_a_setting_stays_known_when_its_jobs_are_gone(
    tenants: type[lowkiq.Worker],
) -> None:
    enqueue(tenants, "acme", ["a1"])
    actions = tenants.actions()
    actions.pause_group("acme")
    assert actions.delete_group("acme") == 1
    assert actions.group_state("acme") == GroupState(True, None, None, "acme", 0, 0)
    assert actions.resume_group("acme") is True  # a paused group can always be resumed
    with pytest.raises(UnknownGroup):
        actions.group_state("acme")


def test_delete_group_deletes_its_queued_jobs_only(tenants: type[lowkiq.Worker]) -> None:
    acme = [f"a{n}" for n in range(40)]
    enqueue(tenants, "acme", acme)  # alone in some shards (not indexed)
    enqueue(tenants, "other", [f"o{n}" for n in range(6)])
    enqueue(tenants, None, [f"d{n}" for n in range(5)])
    queue = tenants.queue()
    running = pop(queue, 0, 5)  # a batch in flight keeps running
    assert running
    in_flight = {job.id for job in running if job.id.startswith("a")}
    assert tenants.actions().delete_group("acme") == 40 - len(in_flight)
    assert tenants.actions().group_state("acme").queued == 0
    left = {job["id"] for job in tenants.queries().fetch(acme)}
    assert left == set()
    others = [f"o{n}" for n in range(6)] + [f"d{n}" for n in range(5)]
    queued = {job["id"] for job in tenants.queries().fetch(others)}
    assert queued == set(others) - {job.id for job in running}
    assert tenants.metrics()["busy"] == len(running)
    # The shards' group indexes stay whole: the other jobs all pop.
    ack(queue, 0)
    popped: set[str] = set()
    for shard in queue.shards:
        while batch := pop(queue, shard, 5):
            popped |= {job.id for job in batch}
            ack(queue, shard)
    assert popped == queued


def test_a_groups_own_cap_is_read_by_the_claims_script(tenants: type[lowkiq.Worker]) -> None:
    enqueue(tenants, "A", ["a1"])
    enqueue(tenants, "B", ["b1"])
    tenants.actions().group_limits("A", concurrency=1)
    claims = GroupClaims(tenants.queue(), cap=3, ttl=30.0)
    claims.own_limits = True
    assert claims.call("claim", "0 1", {"A": 1})[:2] == (True, frozenset({"A"}))
    assert claims.call("claim", "1 1", {"A": 1})[0] is False  # A's own cap: 1
    for shard in (1, 2, 3):  # B keeps the worker's cap, 3
        assert claims.call("claim", f"{shard} 1", {"B": 1})[0] is True
    assert claims.call("claim", "0 2", {"B": 1})[0] is False
    tenants.actions().clear_group_limits("A")
    assert claims.call("claim", "1 1", {"A": 1})[0] is True  # back to the worker's cap


def test_a_groups_own_rate_is_read_by_the_claims_script(tenants: type[lowkiq.Worker]) -> None:
    enqueue(tenants, "A", ["a1"])
    tenants.actions().group_limits("A", rate=lowkiq.RateLimit(1, per=60.0, burst=2))
    claims = GroupClaims(tenants.queue(), cap=None, ttl=30.0, batch_size=5)
    claims.own_limits = True
    assert claims.call("claim", "0 1", {"A": 2})[0] is True  # the bucket holds 2
    granted, _, dry = claims.call("claim", "1 1", {"A": 1})
    assert granted is False
    assert 50 < dry["A"] <= 60  # a token a minute
    assert claims.call("claim", "2 1", {"B": 5})[0] is True  # B has no limit
