"""The read queries of SPEC §5: fetch, range_by_*, the morgue and processing areas."""

from __future__ import annotations

import math

import pytest
import redis
from storage_support import NOW, retry_in

from lowkiq.errors import InvalidQuery, LowkiqError
from tests.leasing import fail, pop

LATER = NOW + 5000


def ids(jobs):
    return [job["id"] for job in jobs]


def fail_once(queue, job_id, now, error="e", max_retry_count=5):
    """Pop ``job_id`` alone at ``now`` and fail it."""
    batch = pop(queue, 0, 10, now=now)
    assert [job.id for job in batch] == [job_id]
    return fail(queue, 0, batch, error, retry_in, max_retry_count, now=now)


@pytest.fixture
def mixed(worker, queue):
    """Ids that are prefixes of each other, fresh and retries.

    fresh: "1", "100", "b" (perform_in LATER); retries: "10" (retry_count 1,
    perform_in NOW + 40), "2" (retry_count 0, perform_in NOW + 41).
    """
    worker.perform_async([{"id": i, "payload": i, "perform_in": LATER} for i in ("1", "100", "b")])
    worker.perform_async([{"id": "10", "payload": "10", "perform_in": NOW}])
    fail_once(queue, "10", NOW, "e10a")
    fail_once(queue, "10", NOW + 20, "e10b")
    worker.perform_async([{"id": "2", "payload": "2", "perform_in": NOW + 31}])
    fail_once(queue, "2", NOW + 31, "e2")
    return worker


@pytest.fixture
def morgue(worker, queue):
    """Dead jobs "1", "10", "100", "2" with updated_at NOW + 1.5, + 2.5, + 3.5, + 4.5."""
    for n, job_id in enumerate(("1", "10", "100", "2")):
        now = NOW + n + 1.5
        worker.perform_async([{"id": job_id, "payload": job_id, "score": n, "perform_in": NOW}])
        fail_once(queue, job_id, now, f"dead {job_id}", max_retry_count=0)
    return worker


# -- fetch ---------------------------------------------------------------


def test_fetch_returns_queued_jobs_in_the_given_order_and_skips_missing_ids(mixed):
    jobs = mixed.queries().fetch(["2", "missing", 1, "10"])
    assert jobs == [
        {
            "id": "2",
            "payloads": [["2", jobs[0]["payloads"][0][1]]],
            "perform_in": NOW + 41,
            "retry_count": 0,
            "error": "e2",
        },
        {
            "id": "1",
            "payloads": [["1", jobs[1]["payloads"][0][1]]],
            "perform_in": LATER,
            "retry_count": -1,
        },
        {
            "id": "10",
            "payloads": [["10", jobs[2]["payloads"][0][1]]],
            "perform_in": NOW + 40,
            "retry_count": 1,
            "error": "e10b",
        },
    ]


def test_fetch_of_nothing_or_missing_ids_is_empty(worker):
    assert worker.queries().fetch([]) == []
    assert worker.queries().fetch(["nope", 3]) == []


def test_fetch_does_not_confuse_ids_that_are_prefixes(worker):
    worker.perform_async([{"id": "10", "payload": "ten"}])
    assert worker.queries().fetch(["1"]) == []
    assert worker.queries().fetch(["100"]) == []
    assert ids(worker.queries().fetch(["10"])) == ["10"]


def test_morgue_fetch_returns_dead_jobs_and_skips_missing_ids(morgue):
    assert morgue.queries().morgue_fetch(["10", "missing", "1"]) == [
        {"id": "10", "payloads": [["10", 1.0]], "updated_at": NOW + 2.5, "error": "dead 10"},
        {"id": "1", "payloads": [["1", 0.0]], "updated_at": NOW + 1.5, "error": "dead 1"},
    ]
    assert morgue.queries().morgue_fetch(["missing"]) == []
    assert morgue.queries().morgue_fetch([]) == []


def test_queued_and_dead_jobs_are_separate(morgue):
    assert morgue.queries().fetch(["1"]) == []
    morgue.perform_async([{"id": "queued"}])
    assert morgue.queries().morgue_fetch(["queued"]) == []


# -- by id ---------------------------------------------------------------


def test_range_by_id_orders_by_bytes_across_fresh_and_retries(mixed):
    assert ids(mixed.queries().range_by_id("-", "+")) == ["1", "10", "100", "2", "b"]
    assert ids(mixed.queries().rev_range_by_id("+", "-")) == ["b", "2", "100", "10", "1"]


def test_range_by_id_limit(mixed):
    assert ids(mixed.queries().range_by_id("-", "+", limit=2)) == ["1", "10"]
    assert ids(mixed.queries().rev_range_by_id("+", "-", limit=2)) == ["b", "2"]
    assert mixed.queries().range_by_id("-", "+", limit=0) == []


def test_range_by_id_default_limit_is_10(worker):
    worker.perform_async([{"id": f"{i:02}"} for i in range(15)])
    assert len(worker.queries().range_by_id("-", "+")) == 10
    assert len(worker.queries().rev_range_by_id("+", "-")) == 10


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        ("[10", "+", ["10", "100", "2", "b"]),
        ("(10", "+", ["100", "2", "b"]),
        ("-", "[10", ["1", "10"]),
        ("-", "(10", ["1"]),
        ("[1", "[1", ["1"]),
        ("(1", "(100", ["10"]),
        ("[1", "(2", ["1", "10", "100"]),
        ("(1", "[2", ["10", "100", "2"]),
        ("[11", "[19", []),
        ("[c", "+", []),
    ],
)
def test_range_by_id_lex_bounds(mixed, low, high, expected):
    assert ids(mixed.queries().range_by_id(low, high)) == expected
    assert ids(mixed.queries().rev_range_by_id(high, low)) == expected[::-1]


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        ("-", "+", ["1", "10", "100", "2"]),
        ("(1", "+", ["10", "100", "2"]),
        ("[10", "[100", ["10", "100"]),
        ("-", "(100", ["1", "10"]),
    ],
)
def test_morgue_range_by_id_lex_bounds(morgue, low, high, expected):
    assert ids(morgue.queries().morgue_range_by_id(low, high)) == expected
    assert ids(morgue.queries().morgue_rev_range_by_id(high, low)) == expected[::-1]


def test_morgue_range_by_id_limit(morgue):
    assert ids(morgue.queries().morgue_range_by_id("-", "+", limit=3)) == ["1", "10", "100"]
    assert ids(morgue.queries().morgue_rev_range_by_id("+", "-", limit=1)) == ["2"]


# -- by perform_in ---------------------------------------------------------


@pytest.fixture
def scheduled(sharded_worker):
    """Ids "0".."9" spread over five shards, perform_in 100.5 + n (pushed below
    perform_async, which takes only timestamps from 2001 on: the bounds read plainly)."""
    sharded_worker.queue().push([(str(n), b'""', None, 100.5 + n, None) for n in range(10)])
    return sharded_worker


def test_range_by_perform_in_merges_all_shards_earliest_first(scheduled):
    queries = scheduled.queries()
    assert ids(queries.range_by_perform_in("-inf", "+inf", limit=100)) == list("0123456789")
    assert ids(queries.rev_range_by_perform_in("+inf", "-inf", limit=100)) == list("9876543210")


def test_range_by_perform_in_limit(scheduled):
    queries = scheduled.queries()
    assert ids(queries.range_by_perform_in("-inf", "+inf", limit=3)) == ["0", "1", "2"]
    assert ids(queries.rev_range_by_perform_in("+inf", "-inf", limit=3)) == ["9", "8", "7"]
    assert len(queries.range_by_perform_in("-inf", "+inf")) == 10


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (102.5, 104.5, ["2", "3", "4"]),
        ("102.5", "104.5", ["2", "3", "4"]),
        ("(102.5", "104.5", ["3", "4"]),
        (102.5, "(104.5", ["2", "3"]),
        ("(102.5", "(104.5", ["3"]),
        (102.6, 104.4, ["3"]),
        (float("-inf"), 101, ["0"]),
        ("-inf", 101.5, ["0", "1"]),
        (108, float("inf"), ["8", "9"]),
        (108, "+inf", ["8", "9"]),
        (110, "+inf", []),
    ],
)
def test_range_by_perform_in_numeric_bounds(scheduled, low, high, expected):
    queries = scheduled.queries()
    assert ids(queries.range_by_perform_in(low, high)) == expected
    assert ids(queries.rev_range_by_perform_in(high, low)) == expected[::-1]


def test_range_by_perform_in_returns_full_jobs(scheduled):
    [job] = scheduled.queries().range_by_perform_in(103, 103.5)
    assert job["perform_in"] == 103.5
    assert job["retry_count"] == -1


# -- by retry_count --------------------------------------------------------


def test_range_by_retry_count_puts_fresh_jobs_at_minus_one(mixed):
    queries = mixed.queries()
    assert ids(queries.range_by_retry_count("-inf", "+inf")) == ["1", "100", "b", "2", "10"]
    assert ids(queries.rev_range_by_retry_count("+inf", "-inf")) == ["10", "2", "b", "100", "1"]


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (-1, -1, ["1", "100", "b"]),
        (0, "+inf", ["2", "10"]),
        ("(-1", "+inf", ["2", "10"]),
        (-1, 0, ["1", "100", "b", "2"]),
        (-1, "(0", ["1", "100", "b"]),
        (1, 1, ["10"]),
        (0.5, 1.5, ["10"]),
        (2, "+inf", []),
    ],
)
def test_range_by_retry_count_bounds(mixed, low, high, expected):
    queries = mixed.queries()
    assert ids(queries.range_by_retry_count(low, high)) == expected
    assert ids(queries.rev_range_by_retry_count(high, low)) == expected[::-1]


def test_range_by_retry_count_limit(mixed):
    queries = mixed.queries()
    assert ids(queries.range_by_retry_count("-inf", "+inf", limit=4)) == ["1", "100", "b", "2"]
    assert ids(queries.rev_range_by_retry_count("+inf", "-inf", limit=3)) == ["10", "2", "b"]


# -- the morgue by updated_at ----------------------------------------------


def test_morgue_range_by_updated_at(morgue):
    queries = morgue.queries()
    assert ids(queries.morgue_range_by_updated_at("-inf", "+inf")) == ["1", "10", "100", "2"]
    assert ids(queries.morgue_rev_range_by_updated_at("+inf", "-inf")) == ["2", "100", "10", "1"]
    assert ids(queries.morgue_range_by_updated_at(NOW + 2.5, NOW + 3.5)) == ["10", "100"]
    assert ids(queries.morgue_range_by_updated_at(f"({NOW + 2.5}", "+inf")) == ["100", "2"]
    assert ids(queries.morgue_rev_range_by_updated_at(f"({NOW + 3.5}", "-inf")) == ["10", "1"]
    assert ids(queries.morgue_range_by_updated_at("-inf", "+inf", limit=2)) == ["1", "10"]
    assert ids(queries.morgue_rev_range_by_updated_at("+inf", "-inf", limit=1)) == ["2"]


# -- processing areas --------------------------------------------------------


def test_processing_data_lists_running_jobs_with_their_processing_copy(worker, queue):
    worker.perform_async([{"id": "r", "payload": "x", "score": 1, "perform_in": NOW - 1}])
    fail_once(queue, "r", NOW, "kaput")
    worker.perform_async([{"id": "f", "payload": "y", "score": 2, "perform_in": NOW - 1}])
    pop(queue, 0, 10, now=NOW + 100)

    data = sorted(worker.queries().processing_data(), key=lambda job: job["id"])
    assert data == [
        {"id": "f", "payloads": [["y", 2.0]], "perform_in": NOW - 1, "retry_count": -1},
        {
            "id": "r",
            "payloads": [["x", 1.0]],
            "perform_in": NOW + retry_in(0),
            "retry_count": 0,
            "error": "kaput",
        },
    ]


def test_processing_data_covers_every_shard(sharded_worker):
    queue = sharded_worker.queue()
    sharded_worker.perform_async([{"id": n, "perform_in": NOW} for n in range(20)])
    for shard in range(5):
        pop(queue, shard, 100, now=NOW)
    assert sorted(ids(sharded_worker.queries().processing_data()), key=int) == [
        str(n) for n in range(20)
    ]


def test_processing_data_is_empty_when_nothing_runs(worker):
    worker.perform_async([{"id": 1}])
    assert worker.queries().processing_data() == []


# -- bad bounds ----------------------------------------------------------------


BAD_ID_BOUNDS = ["abc", "", 5, None, b"[a", "a\0b"]
BAD_NUMERIC_BOUNDS = ["abc", "", "(", "[5", None, [1], float("nan"), "nan", True]


def _id_queries(queries):
    return [
        lambda b: queries.range_by_id(b, "+"),
        lambda b: queries.range_by_id("-", b),
        lambda b: queries.rev_range_by_id(b, "-"),
        lambda b: queries.morgue_range_by_id(b, "+"),
        lambda b: queries.morgue_rev_range_by_id("+", b),
    ]


def _numeric_queries(queries):
    return [
        lambda b: queries.range_by_perform_in(b, "+inf"),
        lambda b: queries.rev_range_by_perform_in("+inf", b),
        lambda b: queries.range_by_retry_count("-inf", b),
        lambda b: queries.rev_range_by_retry_count(b, "-inf"),
        lambda b: queries.morgue_range_by_updated_at(b, "+inf"),
        lambda b: queries.morgue_rev_range_by_updated_at("+inf", b),
    ]


@pytest.mark.parametrize("bound", BAD_ID_BOUNDS)
def test_bad_id_bounds_raise_invalid_query(mixed, bound):
    for query in _id_queries(mixed.queries()):
        with pytest.raises(InvalidQuery, match="bound"):
            query(bound)


@pytest.mark.parametrize("bound", BAD_NUMERIC_BOUNDS)
def test_bad_numeric_bounds_raise_invalid_query(mixed, bound):
    for query in _numeric_queries(mixed.queries()):
        with pytest.raises(InvalidQuery, match="bound"):
            query(bound)


@pytest.mark.parametrize("limit", [-1, 1.5, "10", None])
def test_bad_limits_raise_invalid_query(mixed, limit):
    queries = mixed.queries()
    calls = [
        lambda: queries.range_by_id("-", "+", limit=limit),
        lambda: queries.rev_range_by_perform_in("+inf", "-inf", limit=limit),
        lambda: queries.range_by_retry_count("-inf", "+inf", limit=limit),
        lambda: queries.morgue_rev_range_by_id("+", "-", limit=limit),
        lambda: queries.morgue_range_by_updated_at("-inf", "+inf", limit=limit),
    ]
    for call in calls:
        with pytest.raises(InvalidQuery, match="limit"):
            call()


def test_invalid_query_is_a_value_error_and_a_lowkiq_error(worker):
    with pytest.raises(ValueError) as caught:
        worker.queries().range_by_id("x", "+")
    assert isinstance(caught.value, LowkiqError)
    assert not isinstance(caught.value, redis.ResponseError)


def test_infinite_and_huge_numeric_bounds_are_accepted(scheduled):
    queries = scheduled.queries()
    assert len(queries.range_by_perform_in(-math.inf, math.inf, limit=100)) == 10
    assert len(queries.range_by_perform_in(-1e308, 1e308, limit=100)) == 10


def test_an_int_too_large_for_a_float_is_a_bound_or_an_invalid_query(scheduled):
    """Redis reads such a bound as infinite; lowkiq may agree or refuse it clearly."""
    try:
        jobs = scheduled.queries().range_by_perform_in(-(10**400), 10**400, limit=100)
    except InvalidQuery:
        return
    assert len(jobs) == 10
