"""Property tests against a real Redis: random input at the public edge, and random
sequences of storage operations, each checked against a pure-Python model of
SPEC §3 and §4."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from storage_support import hot_layout, run_machine

import lowkiq
from lowkiq.errors import InvalidJob
from lowkiq.storage.queue import PoppedJob
from tests.leasing import ack, fail, pop, restore

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class FuzzWorker(lowkiq.Worker):
    """Two shards, so a call's jobs spread over shards."""

    shards_count = 2


# -- perform_async with random jobs ----------------------------------------

ids = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=3),
    st.integers(),
    st.integers(min_value=10**4290, max_value=10**4310),  # past str()'s digit limit
    st.floats(),
    st.binary(max_size=8),
    st.none(),
    st.sampled_from(["a", "b", "ü", "a\0b", "", " "]),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=4),
)
payloads = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
numbers = st.one_of(
    st.floats(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.booleans(),
    st.text(max_size=3),
    st.sampled_from([0, 1.5, 1e308]),
)
fuzzed_jobs = st.fixed_dictionaries(
    {"id": ids},
    optional={"payload": payloads, "score": numbers, "perform_in": numbers, "extra": st.just(1)},
)
#: A unix time (2023-11-14) the jobs' explicit perform_in values are near.
BASE = 1_700_000_000
#: Valid jobs over a few ids and payloads, so that calls merge onto each other.
merging_jobs = st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "ü", 7, 7.5])},
    optional={
        "payload": st.sampled_from(
            [{"b": 1, "a": [2, None]}, "x", 3, [], {"a": [2, None], "b": 1}]
        ),
        "score": st.integers(0, 4),
        "perform_in": st.integers(0, 4).map(lambda n: BASE + n),
    },
)
jobs = st.one_of(merging_jobs, merging_jobs, merging_jobs, fuzzed_jobs)


def reference_payload(value: Any) -> bytes:
    """SPEC §3/§6: canonical JSON, so equal values give equal bytes."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode()


def reference_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(value)
    number = float(value)  # OverflowError for huge ints
    if not math.isfinite(number):
        raise ValueError(value)
    return number


def reference_time(value: Any) -> float:
    """A perform_in: a unix time from 2001-01-01 to 2200-01-01."""
    number = reference_number(value)
    if not 978_307_200 <= number < 7_258_118_400:
        raise ValueError(value)
    return number


#: A time known to lie between two readings of Redis's clock (one reading for a
#: value given by the caller).
Span = tuple[float, float]


def reference_job(job: dict[str, Any], now: Span) -> tuple[str, bytes, Span, Span]:
    """A job as SPEC §2 defines it, or ``ValueError`` when it is not one; a missing
    score or perform_in is Redis's time during the call, ``now``."""
    if set(job) - {"id", "payload", "score", "perform_in"} or job.get("id") is None:
        raise ValueError(job)
    if isinstance(job["id"], (bytes, bool)):
        raise ValueError(job)
    try:
        job_id = str(job["id"])
        job_id.encode()
        payload = reference_payload(job.get("payload", ""))
        score = (reference_number(job["score"]),) * 2 if "score" in job else now
        perform_in = (reference_time(job["perform_in"]),) * 2 if "perform_in" in job else now
    except (ValueError, TypeError, OverflowError, UnicodeEncodeError) as exc:
        raise ValueError(job) from exc
    if "\0" in job_id:
        raise ValueError(job)
    return job_id, payload, score, perform_in


def redis_time(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def snapshot(client: redis.Redis) -> dict[bytes, bytes | None]:
    return {key: client.dump(key) for key in client.scan_iter(count=1000)}


@given(calls=st.lists(st.lists(jobs, min_size=1, max_size=4), min_size=1, max_size=4))
@PROPERTY_SETTINGS
def test_perform_async_enqueues_what_the_merge_rules_predict_or_changes_nothing(
    redis_client: redis.Redis, calls: list[list[dict[str, Any]]]
) -> None:
    redis_client.flushall()
    lowkiq.settings.workers = [FuzzWorker]
    model: dict[str, dict[str, Any]] = {}
    for call in calls:
        start = redis_time(redis_client)
        try:
            checked = [reference_job(job, (start, start)) for job in call]
        except ValueError:
            checked = None
        before = snapshot(redis_client)
        if checked is None:
            with pytest.raises(InvalidJob):
                FuzzWorker.perform_async(call)
            assert snapshot(redis_client) == before
            continue
        FuzzWorker.perform_async(call)
        now = (start, redis_time(redis_client))
        expected = [reference_job(job, now) for job in call]
        for job_id, payload, score, perform_in in expected:
            queued = model.setdefault(job_id, {"payloads": {}, "perform_in": perform_in})
            known = queued["payloads"].get(payload)
            queued["payloads"][payload] = score if known is None else _earlier(known, score)

    found = FuzzWorker.queries().range_by_id("-", "+", limit=1000)
    assert sorted(job["id"] for job in found) == sorted(model)
    for job in found:
        queued = model[job["id"]]
        stored = [[reference_payload(payload), score] for payload, score in job["payloads"]]
        assert stored == sorted(stored, key=_by_score)
        assert {payload for payload, _ in stored} == set(queued["payloads"])
        for payload, score in stored:
            low, high = queued["payloads"][payload]
            assert low <= score <= high
        low, high = queued["perform_in"]
        assert low <= job["perform_in"] <= high and job["retry_count"] == -1
        assert "error" not in job


def _earlier(a: Span, b: Span) -> Span:
    """The smaller of two times known within spans lies within this span."""
    return min(a[0], b[0]), min(a[1], b[1])


def _by_score(pair: list[Any]) -> tuple[float, bytes]:
    return pair[1], pair[0]


# -- random sequences of storage operations ----------------------------------

MAX_RETRY_COUNT = 2


def retry_in(retry_count: int) -> float:
    return 10.0 * (retry_count + 1)


@dataclass
class ModelJob:
    """A queued (or processing) job of the model."""

    payloads: dict[str, float]
    perform_in: float
    retry_count: int = -1
    error: str | None = None

    def ordered(self) -> list[list[Any]]:
        return [[p, s] for p, s in sorted(self.payloads.items(), key=lambda i: (i[1], i[0]))]


@dataclass
class ModelDead:
    payloads: dict[str, float]
    updated_at: float
    error: str | None


def union(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    merged = dict(a)
    for payload, score in b.items():
        merged[payload] = min(score, merged.get(payload, score))
    return merged


@dataclass
class Model:
    """SPEC §3 and §4 over one shard, in plain Python."""

    queued: dict[str, ModelJob] = field(default_factory=dict)
    processing: list[tuple[str, ModelJob]] = field(default_factory=list)
    morgue: dict[str, ModelDead] = field(default_factory=dict)
    processed: int = 0
    failed: int = 0

    def merge(self, job_id: str, job: ModelJob, keep_schedule: bool) -> None:
        queued = self.queued.get(job_id)
        if queued is None:
            self.queued[job_id] = job
        elif keep_schedule:  # rule 2
            queued.payloads = union(queued.payloads, job.payloads)
        else:  # rules 3 and 4
            self.queued[job_id] = replace(job, payloads=union(queued.payloads, job.payloads))

    def bury(self, job_id: str, payloads: dict[str, float], error: str | None, now: float) -> None:
        dead = self.morgue.get(job_id)
        merged = payloads if dead is None else union(dead.payloads, payloads)
        self.morgue[job_id] = ModelDead(merged, now, error)


class StorageWorker(lowkiq.Worker):
    """One shard: every job of the machine is in shard 0."""

    shards_count = 1


PAYLOADS = st.sampled_from(["a", "b", "c", "d", "e"])
#: Ids some of which begin others ("1" before "10" before "100" in id order).
JOB_IDS = st.sampled_from(["1", "2", "3", "x", "10", "100", "1x"])
#: Delays of a pushed job: often the same in one call, so a pop takes runs of ids due at
#: one perform_in (read from the fresh zset several at a time).
DELAYS = st.one_of(st.sampled_from([-5, 0]), st.integers(-5, 30))


class StorageMachine(RuleBasedStateMachine):
    """push/pop/ack/fail/restore and the morgue actions, on Redis and on the model."""

    client: redis.Redis

    def __init__(self) -> None:
        super().__init__()
        self.client.flushall()
        lowkiq.settings.workers = [StorageWorker]
        self.queue = StorageWorker.queue()
        self.model = Model()
        self.clock = time.time()

    def tick(self, seconds: float) -> float:
        self.clock = max(self.clock, time.time()) + seconds
        return self.clock

    @initialize()
    def start(self) -> None:
        self.tick(0)

    @rule(
        batch=st.lists(
            st.tuples(JOB_IDS, PAYLOADS, st.integers(0, 5), DELAYS),
            min_size=1,
            max_size=6,
        )
    )
    def push(self, batch: list[tuple[str, str, int, int]]) -> None:
        now = self.tick(0.001)
        StorageWorker.perform_async(
            [{"id": i, "payload": p, "score": s, "perform_in": now + d} for i, p, s, d in batch]
        )
        first: dict[str, ModelJob] = {}
        for job_id, payload, score, delay in batch:
            job = first.setdefault(job_id, ModelJob({}, now + delay))
            job.payloads = union(job.payloads, {payload: float(score)})
        for job_id, job in first.items():
            self.model.merge(job_id, job, keep_schedule=True)

    @rule(limit=st.integers(1, 6), advance=st.sampled_from([0, 15, 100]))
    def pop(self, limit: int, advance: int) -> None:
        now = self.tick(advance)
        popped = pop(self.queue, 0, limit, now=now)
        if self.model.processing:
            assert popped is None
            return
        due = sorted(
            (job.perform_in, job_id.encode(), job_id)
            for job_id, job in self.model.queued.items()
            if job.perform_in <= now
        )[:limit]
        expected = [(job_id, self.model.queued.pop(job_id)) for _, _, job_id in due]
        self.model.processing = expected
        assert popped is not None
        assert [(job.id, job.retry_count, job.payloads) for job in popped] == [
            (job_id, job.retry_count, [p for p, _ in job.ordered()]) for job_id, job in expected
        ]

    @rule()
    def ack(self) -> None:
        ack(self.queue, 0)
        self.model.processed += len(self.model.processing)
        self.model.processing = []

    @rule(error=st.sampled_from(["boom", "bang"]))
    def fail(self, error: str) -> None:
        now = self.tick(0.001)
        batch = pop_view(self.model)
        dead = fail(self.queue, 0, batch, error, retry_in, MAX_RETRY_COUNT, now=now)
        expected_dead = []
        for job_id, job in self.model.processing:
            retry_count = job.retry_count + 1
            if retry_count >= MAX_RETRY_COUNT:
                first, *rest = job.ordered()
                self.model.bury(job_id, {first[0]: first[1]}, error, now)
                expected_dead.append({"id": job_id, "payloads": [first], "error": error})
                if rest:
                    self.model.merge(job_id, ModelJob(dict(rest), now), keep_schedule=False)
            else:
                retry = ModelJob(job.payloads, now + retry_in(retry_count), retry_count, error)
                self.model.merge(job_id, retry, keep_schedule=False)
        self.model.failed += len(self.model.processing)
        self.model.processing = []
        assert dead == expected_dead

    @rule()
    def restore(self) -> None:
        assert restore(self.queue, 0, now=self.tick(0.001)) == len(self.model.processing)
        for job_id, job in self.model.processing:
            self.model.merge(job_id, job, keep_schedule=False)
        self.model.processing = []

    @rule()
    def kill_failed(self) -> None:
        killed = StorageWorker.actions().kill_all_failed_jobs()
        failed = [i for i, job in self.model.queued.items() if job.retry_count >= 0]
        assert killed == len(failed)
        for job_id in failed:
            job = self.model.queued.pop(job_id)
            self.model.bury(job_id, job.payloads, job.error, self.stored_updated_at(job_id))

    @rule()
    def delete_failed(self) -> None:
        failed = [i for i, job in self.model.queued.items() if job.retry_count >= 0]
        assert StorageWorker.actions().delete_all_failed_jobs() == len(failed)
        for job_id in failed:
            del self.model.queued[job_id]

    @rule(job_id=JOB_IDS)
    def morgue_queue_up(self, job_id: str) -> None:
        before = time.time()
        moved = StorageWorker.actions().morgue_queue_up([job_id])
        dead = self.model.morgue.pop(job_id, None)
        assert moved == (dead is not None)
        if dead is not None:
            [job] = StorageWorker.queries().fetch([job_id])
            assert before <= job["perform_in"] <= time.time()  # rule 4: now, retry_count -1
            self.model.merge(
                job_id, ModelJob(dead.payloads, job["perform_in"], -1, dead.error), False
            )

    @rule(job_id=JOB_IDS)
    def morgue_delete(self, job_id: str) -> None:
        assert StorageWorker.actions().morgue_delete([job_id]) == (
            self.model.morgue.pop(job_id, None) is not None
        )

    def stored_updated_at(self, job_id: str) -> float:
        [dead] = StorageWorker.queries().morgue_fetch([job_id])
        assert abs(dead["updated_at"] - time.time()) < 60
        return float(dead["updated_at"])

    @invariant()
    def storage_equals_the_model(self) -> None:
        queries = StorageWorker.queries()
        queued = {job["id"]: job for job in queries.range_by_id("-", "+", limit=100)}
        assert set(queued) == set(self.model.queued)
        for job_id, job in self.model.queued.items():
            stored = queued[job_id]
            assert stored["payloads"] == job.ordered()
            assert (stored["perform_in"], stored["retry_count"]) == (
                job.perform_in,
                job.retry_count,
            )
            assert stored.get("error") == job.error
        busy = queries.processing_data()
        assert [(j["id"], j["payloads"]) for j in busy] == sorted(
            (job_id, job.ordered()) for job_id, job in self.model.processing
        )
        dead = {job["id"]: job for job in queries.morgue_range_by_id("-", "+", limit=100)}
        assert set(dead) == set(self.model.morgue)
        for job_id, entry in self.model.morgue.items():
            stored = dead[job_id]
            assert stored["payloads"] == ModelJob(entry.payloads, 0).ordered()
            assert (stored["updated_at"], stored.get("error")) == (entry.updated_at, entry.error)
        metrics = StorageWorker.metrics()
        assert (metrics["processed"], metrics["failed"]) == (
            self.model.processed,
            self.model.failed,
        )


def pop_view(model: Model) -> list[Any]:
    """The batch as the worker holds it (only ids and retry counts matter to fail)."""
    return [PoppedJob(job_id, job.retry_count) for job_id, job in model.processing]


@pytest.fixture(params=["packed", "hot"])
def machine_layout(request: pytest.FixtureRequest) -> Iterator[None]:
    """The default payload layout, or every job with two payloads or more a hot id."""
    if request.param == "packed":
        yield
        return
    with hot_layout(SPILL_PAYLOADS=1):
        yield


def test_random_operations_keep_the_storage_equal_to_the_model(
    redis_client: redis.Redis, machine_layout: None
) -> None:
    StorageMachine.client = redis_client
    run_machine(StorageMachine, max_examples=50)
