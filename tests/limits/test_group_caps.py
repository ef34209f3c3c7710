"""What one process asks Redis about its worker's full groups (``lowkiq.limits.group_caps``):
while a group stays at its cap, the question "which groups are full?" comes less and
less often, up to ``FULL_REFRESH_MAX`` apart, so a fleet whose group stays capped asks
about once a second per process; an answer that changes the full groups brings the
question back to every ``FULL_REFRESH``.  Against a real Redis, on a clock the test
moves."""

from __future__ import annotations

import pytest
import redis

import lowkiq
from lowkiq.limits.group_caps import FULL_REFRESH, FULL_REFRESH_MAX, GroupCaps
from lowkiq.storage.group_claims import GroupClaims, claimant
from tests.moved_clock import Clock


class Tenanted(lowkiq.Worker):
    """A worker with at most one batch of a group at a time."""

    shards_count = 2
    group_concurrency = 1


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def caps(redis_client: redis.Redis, clock: Clock) -> GroupCaps:
    lowkiq.settings.workers = [Tenanted]
    return GroupCaps(GroupClaims(Tenanted.queue(), cap=1, ttl=30.0), clock=clock)


def questions(caps: GroupCaps, clock: Clock, seconds: float) -> list[float]:
    """Run the process's upkeep every 10 ms for ``seconds``, answering its calls from
    Redis; the times (from the start) it asked which groups are full."""
    start, asked = clock.now, []
    while clock.now - start < seconds:
        for call in caps.upkeep():
            caps.answer(caps.claims.reply(call))
            if call.op == "full":
                asked.append(round(clock.now - start, 2))
        clock.now += 0.01
    return asked


def test_a_group_that_stays_full_is_asked_about_less_and_less_often(
    caps: GroupCaps, clock: Clock
) -> None:
    other = GroupClaims(Tenanted.queue(), cap=1, ttl=30.0)  # another process's batch
    other.call("claim", claimant(0, "7 host"), {"A": 1})
    assert caps.answer(caps.claims.reply(caps.claim_call(1, "3 me", {"A": 1}))) is False  # refused
    assert caps.full == {"A"} and caps.retry_in() == pytest.approx(FULL_REFRESH)

    asked = questions(caps, clock, 10.0)
    gaps = [round(b - a, 2) for a, b in zip(asked, asked[1:], strict=False)]
    assert gaps[:3] == [pytest.approx(0.2, abs=0.011), pytest.approx(0.4, abs=0.011),
                        pytest.approx(0.8, abs=0.011)]  # fmt: skip
    assert max(gaps) <= FULL_REFRESH_MAX + 0.011 and len(asked) <= 10  # not 100 in 10 s
    assert caps.retry_in() <= FULL_REFRESH_MAX  # a shard that gave no job looks then

    # The other process's batch ends: the next answer frees A, and the questions stop.
    other.call("release", claimant(0, "7 host"), {"A": 0})
    assert questions(caps, clock, FULL_REFRESH_MAX + 0.02) and caps.full == frozenset()
    assert questions(caps, clock, 5.0) == []


def test_an_answer_that_changes_the_full_groups_brings_the_question_back_soon(
    caps: GroupCaps, clock: Clock
) -> None:
    other = GroupClaims(Tenanted.queue(), cap=1, ttl=30.0)
    other.call("claim", claimant(0, "7 host"), {"A": 1})
    caps.answer(caps.claims.reply(caps.claim_call(1, "3 me", {"A": 1})))
    questions(caps, clock, 5.0)
    assert caps.refresh == FULL_REFRESH_MAX
    other.call("claim", claimant(1, "8 host"), {"B": 1})  # B fills up too
    questions(caps, clock, FULL_REFRESH_MAX + 0.02)
    assert caps.full == {"A", "B"} and caps.refresh == FULL_REFRESH * 2
