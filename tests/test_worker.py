"""``lowkiq.Worker``: defaults, validation of jobs and class attributes, the shard
function, client middlewares, overriding ``perform_async``, and Redis being down."""

from __future__ import annotations

import datetime
import decimal
import math
import socket
import uuid

import pytest
import redis
import redis.backoff
import redis.retry

import lowkiq
import lowkiq.testing
from lowkiq.errors import ConfigurationError, InvalidJob, LowkiqError, RedisUnavailable
from tests.leasing import pop


@pytest.fixture
def worker(redis_client):
    class OrderWorker(lowkiq.Worker):
        shards_count = 3

    lowkiq.settings.workers = [OrderWorker]
    return OrderWorker


def queued_ids(worker):
    return [job["id"] for job in worker.queries().range_by_id("-", "+", limit=1000)]


# -- defaults ------------------------------------------------------------------


def test_class_defaults(redis_client):
    class Defaults(lowkiq.Worker):
        pass

    assert (Defaults.shards_count, Defaults.batch_size, Defaults.max_retry_count) == (5, 1, 25)
    assert Defaults.queue_name == "Defaults"
    assert Defaults.retries_exhausted([{"id": "1", "payloads": [1], "error": "e"}]) is None


def test_queue_name_defaults_to_the_class_name_of_each_subclass(redis_client):
    class Base(lowkiq.Worker):
        queue_name = "shared"

    class Child(Base):
        pass

    assert Base.queue_name == "shared"
    assert Child.queue_name == "Child"


@pytest.mark.parametrize("retry_count", [0, 1, 2, 5, 24])
def test_default_retry_in_formula(monkeypatch, retry_count):
    """retry_in(c) = c**4 + 15 + randrange(30) * (c + 1)."""
    base = retry_count**4 + 15
    monkeypatch.setattr("random.randrange", lambda n: 0 if n == 30 else pytest.fail(n))
    assert lowkiq.Worker.retry_in(retry_count) == base
    monkeypatch.setattr("random.randrange", lambda n: n - 1)
    assert lowkiq.Worker.retry_in(retry_count) == base + 29 * (retry_count + 1)


@pytest.mark.parametrize("retry_count", [0, 3])
def test_default_retry_in_stays_in_range_and_varies(retry_count):
    low = retry_count**4 + 15
    values = {lowkiq.Worker.retry_in(retry_count) for _ in range(300)}
    assert all(low <= value <= low + 29 * (retry_count + 1) for value in values)
    assert all((value - low) % (retry_count + 1) == 0 for value in values)
    assert len(values) > 10


# -- the shard function ----------------------------------------------------------


def crc32(data: bytes) -> int:
    """Bitwise CRC-32 (IEEE 802.3), independent of zlib."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_reference_crc32_vectors():
    assert crc32(b"1") == 2212294583
    assert crc32(b"2") == 450215437
    assert crc32(b"123456789") == 0xCBF43926
    assert crc32(b"") == 0


@pytest.mark.parametrize("shards_count", [1, 5, 7, 24])
@pytest.mark.parametrize("job_id", [1, "1", "2", 10, "order-42", "заказ", 123456789])
def test_a_job_lands_in_shard_crc32_of_its_id_modulo_shards_count(
    redis_client, shards_count, job_id
):
    class ShardWorker(lowkiq.Worker):
        pass

    ShardWorker.shards_count = shards_count
    lowkiq.settings.workers = [ShardWorker]
    expected = crc32(str(job_id).encode()) % shards_count
    ShardWorker.perform_async([{"id": job_id}])

    queue = ShardWorker.queue()
    assert queue.shard_of(str(job_id)) == expected
    found = {shard: pop(queue, shard, 10) for shard in range(shards_count)}
    assert {shard: [job.id for job in jobs] for shard, jobs in found.items() if jobs} == {
        expected: [str(job_id)]
    }


def test_shard_vectors_for_five_shards(redis_client):
    queue = lowkiq.Worker.queue()  # shards_count 5
    assert [queue.shard_of(job_id) for job_id in ("1", "2", "123456789", "")] == [
        2212294583 % 5,
        450215437 % 5,
        3421780262 % 5,
        0,
    ]


# -- bad jobs --------------------------------------------------------------------

GOOD = {"id": "good", "payload": {"ok": True}}


class Unserializable:
    pass


def cyclic():
    payload: list = []
    payload.append(payload)
    return payload


BAD_JOBS = [
    ({"payload": 1}, "id"),
    ({"id": None}, "id"),
    ({"id": 1, "payload": {1, 2}}, "payload"),
    ({"id": 1, "payload": object()}, "payload"),
    ({"id": 1, "payload": Unserializable()}, "payload"),
    ({"id": 1, "payload": {"x": math.nan}}, "payload"),
    ({"id": 1, "payload": [math.inf]}, "payload"),
    ({"id": 1, "payload": cyclic()}, "payload"),
    ({"id": 1, "payload": {"a": b"bytes"}}, "payload"),
    ({"id": 1, "score": "1"}, "score"),
    ({"id": 1, "score": None}, "score"),
    ({"id": 1, "score": math.nan}, "score"),
    ({"id": 1, "score": math.inf}, "score"),
    ({"id": 1, "score": -math.inf}, "score"),
    ({"id": 1, "score": True}, "score"),
    ({"id": 1, "score": 10**400}, "score"),
    ({"id": 1, "perform_in": "now"}, "perform_in"),
    ({"id": 1, "perform_in": math.nan}, "perform_in"),
    ({"id": 1, "perform_in": math.inf}, "perform_in"),
    ({"id": 1, "perform_in": -math.inf}, "perform_in"),
    ({"id": 1, "perform_in": [1]}, "perform_in"),
    ({"id": 1, "perform_in": -(10**400)}, "perform_in"),
    ({"id": 10**5000}, "id"),  # past Python's int -> str digit limit
    ({"id": "a\ud800b"}, "id"),  # a lone surrogate cannot be stored as UTF-8
    ({"id": 1, "delay": 5, "perform_in": 2e9}, "delay"),  # one or the other
    ({"id": 1, "delay": -1}, "delay"),
    ({"id": 1, "delay": "60"}, "delay"),
    ({"id": 1, "delay": math.inf}, "delay"),
    ({"id": 1, "perform_at": 5}, "perform_at"),
    ({"id": 1, "payloads": [1]}, "payloads"),
]


@pytest.mark.parametrize(
    ("bad", "field"), BAD_JOBS, ids=[f"{field}-{n}" for n, (_, field) in enumerate(BAD_JOBS)]
)
def test_a_bad_job_raises_invalid_job_naming_index_and_field(worker, redis_client, bad, field):
    with pytest.raises(InvalidJob) as caught:
        worker.perform_async([GOOD, dict(GOOD, id="other"), bad, GOOD])
    error = caught.value
    assert isinstance(error, LowkiqError)
    assert (error.index, error.field) == (2, field)
    assert "2" in str(error) and field in str(error)
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize(
    "jobs",
    [{"id": 1}, "1", b"1", 1, None, {1, 2}, (job for job in [GOOD])],
    ids=["dict", "str", "bytes", "int", "None", "set", "generator"],
)
def test_a_non_list_argument_raises_invalid_job(worker, redis_client, jobs):
    with pytest.raises(InvalidJob):
        worker.perform_async(jobs)
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize("job", ["1", 1, None, [("id", 1)]])
def test_a_job_that_is_not_a_dict_raises_invalid_job(worker, redis_client, job):
    with pytest.raises(InvalidJob) as caught:
        worker.perform_async([GOOD, job])
    assert caught.value.index == 1
    assert redis_client.dbsize() == 0


def test_a_valid_list_is_enqueued_and_an_empty_one_is_a_no_op(worker, redis_client):
    worker.perform_async([])
    assert redis_client.dbsize() == 0
    worker.perform_async([GOOD, {"id": 2, "payload": None, "score": 1, "perform_in": 1e9 + 2.5}])
    assert queued_ids(worker) == ["2", "good"]
    [job] = worker.queries().fetch([2])
    assert job == {"id": "2", "payloads": [[None, 1.0]], "perform_in": 1e9 + 2.5, "retry_count": -1}


def test_ids_of_any_type_are_stored_as_str(worker):
    worker.perform_async([{"id": 5}, {"id": 2.5}, {"id": ("a", 1)}, {"id": "x y"}])
    assert sorted(queued_ids(worker)) == sorted(["5", "2.5", "('a', 1)", "x y"])


class Opaque:
    """An object whose str is the default repr: its address."""


class WithRepr:
    def __repr__(self) -> str:
        return f"<WithRepr at {id(self):#x}>"


@pytest.mark.parametrize(
    "job_id",
    [b"x", bytearray(b"x"), True, False, Opaque(), WithRepr(), lambda: 1, object()],
    ids=["bytes", "bytearray", "True", "False", "object", "repr-address", "function", "bare"],
)
def test_an_id_without_a_value_based_str_raises_invalid_job(worker, redis_client, job_id):
    with pytest.raises(InvalidJob) as caught:
        worker.perform_async([GOOD, {"id": job_id}])
    assert (caught.value.index, caught.value.field) == (1, "id")
    assert "str, an int or a value with a value-based str" in str(caught.value)
    assert redis_client.dbsize() == 0


def test_a_bytes_id_is_refused_with_a_hint_to_decode_it(worker):
    with pytest.raises(InvalidJob, match=r"got bytes b'order-1': decode it first"):
        worker.perform_async([{"id": b"order-1"}])


def test_ids_with_a_value_based_str_are_stored_as_that_str(worker):
    values = [uuid.UUID(int=7), decimal.Decimal("1.50"), 2.5, ("a", 1), 10**20, -3]
    worker.perform_async([{"id": value} for value in values])
    assert sorted(queued_ids(worker)) == sorted(str(value) for value in values)


@pytest.mark.parametrize(
    ("perform_in", "says"),
    [
        (60, "for 60 seconds from now, give time.time() + 60"),
        (0, "got 0"),
        (0.5, "got 0.5"),
        (-1e300, "got -1e+300"),
        (978_307_199.0, "got 978307199.0"),
        (7_258_118_400.0, "got 7258118400.0"),
        (1e300, "got 1e+300"),
        (math.nan, "must be finite, got nan"),
        (math.inf, "must be finite, got inf"),
    ],
)
def test_a_perform_in_that_is_no_timestamp_from_2001_to_2200_raises_invalid_job(
    worker, redis_client, perform_in, says
):
    with pytest.raises(InvalidJob) as caught:
        worker.perform_async([GOOD, {"id": 1, "perform_in": perform_in}])
    assert (caught.value.index, caught.value.field) == (1, "perform_in")
    assert says in str(caught.value)
    assert redis_client.dbsize() == 0


def test_a_single_job_dict_is_refused_as_the_whole_argument_not_as_job_0(worker, redis_client):
    calls = []

    def listing(worker, jobs, call_next):  # a middleware that relies on a list
        calls.append(list(jobs))
        return call_next(worker, jobs)

    lowkiq.settings.client_middlewares = [listing]
    with pytest.raises(InvalidJob) as caught:
        worker.perform_async({"id": 1, "payload": "paid"})

    message = str(caught.value)
    assert "job 0" not in message
    assert message.startswith("perform_async: 'jobs' must be a list of job dicts, got one dict")
    assert "perform_async([{...}])" in message
    assert (caught.value.index, caught.value.field) == (None, "jobs")
    assert calls == [] and redis_client.dbsize() == 0


def test_a_timezone_aware_datetime_is_taken_as_perform_in(worker):
    at = datetime.datetime(2030, 1, 2, 3, 4, 5, 250_000, tzinfo=datetime.timezone.utc)
    later = at.astimezone(datetime.timezone(datetime.timedelta(hours=-5)))
    worker.perform_async([{"id": 1, "perform_in": at}, {"id": 2, "perform_in": later}])

    one, two = worker.queries().fetch([1, 2])
    assert one["perform_in"] == two["perform_in"] == at.timestamp() == 1893553445.25


def test_a_naive_datetime_perform_in_is_refused_saying_to_give_a_timezone(worker, redis_client):
    with pytest.raises(InvalidJob) as caught:
        worker.perform_async([GOOD, {"id": 1, "perform_in": datetime.datetime(2030, 1, 2)}])

    assert (caught.value.index, caught.value.field) == (1, "perform_in")
    assert "naive datetime (2030-01-02T00:00:00)" in str(caught.value)
    assert "timezone" in str(caught.value) and "unix timestamp" in str(caught.value)
    assert redis_client.dbsize() == 0


def test_a_timedelta_perform_in_is_refused_with_a_hint_to_give_delay(worker, redis_client):
    with pytest.raises(InvalidJob, match=r'for 90.0 seconds from now give "delay": 90.0'):
        worker.perform_async([{"id": 1, "perform_in": datetime.timedelta(seconds=90)}])
    assert redis_client.dbsize() == 0


def test_perform_in_bounds_and_any_finite_score_are_taken(worker):
    jobs = [
        {"id": "earliest", "perform_in": 978_307_200.0},
        {"id": "latest", "perform_in": 7_258_118_399.0},
        {"id": "version", "score": -1e300},
    ]
    worker.perform_async(jobs)
    assert sorted(queued_ids(worker)) == ["earliest", "latest", "version"]


def test_perform_async_uses_one_round_trip_per_call(worker, redis_url):
    template = redis.Redis.from_url(redis_url)
    sends = []

    class CountingConnection(template.connection_pool.connection_class):
        def send_packed_command(self, command, check_health=True):
            sends.append(command)
            return super().send_packed_command(command, check_health)

    pool = redis.ConnectionPool(
        connection_class=CountingConnection, **template.connection_pool.connection_kwargs
    )
    lowkiq.settings.redis = lambda: redis.Redis(connection_pool=pool)
    worker.perform_async([GOOD])  # connects and loads the scripts
    sends.clear()
    worker.perform_async([{"id": n, "payload": {"n": n}} for n in range(1000)])
    assert len(sends) == 1
    assert worker.metrics()["length"] == 1001


# -- bad worker classes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("shards_count", 0),
        ("shards_count", -3),
        ("shards_count", "5"),
        ("shards_count", 2.0),
        ("batch_size", "10"),
        ("batch_size", 1.5),
        ("batch_size", 0),
        ("batch_size", None),
        ("max_retry_count", -1),
        ("max_retry_count", "25"),
        ("weight", 0),
        ("weight", -1.5),
        ("weight", "3"),
        ("weight", True),
        ("weight", float("nan")),
        ("weight", float("inf")),
    ],
)
def test_a_bad_class_attribute_is_rejected_at_definition(redis_client, attribute, value):
    with pytest.raises(ConfigurationError, match=attribute):
        type("BadWorker", (lowkiq.Worker,), {attribute: value})


def test_a_perform_without_classmethod_is_refused_at_definition_naming_the_class():
    with pytest.raises(ConfigurationError) as raised:

        class OrderWorker(lowkiq.Worker):
            def perform(self, payloads_by_id):
                pass

    message = str(raised.value)
    assert "OrderWorker.perform" in message and "@classmethod" in message
    assert "\n" not in message


def test_an_async_perform_without_classmethod_is_refused():
    with pytest.raises(ConfigurationError, match=r"OrderWorker.perform .*async def perform"):

        class OrderWorker(lowkiq.Worker):
            async def perform(self, payloads_by_id):
                pass


@pytest.mark.parametrize(
    "source",
    [
        "def retry_in(self, retry_count): return 1.0",
        "def retries_exhausted(self, jobs): pass",
        "def perform(cls, payloads_by_id): pass",
    ],
)
def test_other_hooks_without_classmethod_are_refused(source):
    namespace: dict = {}
    exec(source, namespace)
    name = source.split()[1].split("(")[0]
    with pytest.raises(ConfigurationError, match=f"SyncWorker.{name} is a plain method"):
        type("SyncWorker", (lowkiq.Worker,), {name: namespace[name]})


def test_a_perform_of_iterable_worker_without_classmethod_is_refused():
    with pytest.raises(ConfigurationError, match="ReindexWorker.perform_one"):

        class ReindexWorker(lowkiq.IterableWorker):
            def perform_one(self, job_id, payload):
                pass


def test_a_plain_perform_of_a_mixin_is_refused_too():
    class Auditing:
        def perform(self, payloads_by_id):
            pass

    with pytest.raises(ConfigurationError, match="AuditedWorker.perform is a plain method"):

        class AuditedWorker(Auditing, lowkiq.Worker):
            pass


def test_hooks_that_can_be_called_on_the_class_are_taken(redis_client):
    class StaticWorker(lowkiq.Worker):
        shards_count = 1

        @staticmethod
        def perform(payloads_by_id):
            seen.append(payloads_by_id)

        def retry_in(retry_count):  # a plain function taking just the count works too
            return 1.0

    seen: list = []
    StaticWorker.perform_async([{"id": 1, "payload": "x"}])
    lowkiq.testing.drain(StaticWorker)
    assert seen == [{"1": ["x"]}]
    assert StaticWorker.retry_in(0) == 1.0


@pytest.mark.parametrize(("attribute", "value"), [("shards_count", 0), ("batch_size", "10")])
def test_a_bad_class_attribute_is_rejected_when_registered(redis_client, attribute, value):
    class LaterBroken(lowkiq.Worker):
        pass

    setattr(LaterBroken, attribute, value)
    with pytest.raises(ConfigurationError, match=f"LaterBroken.{attribute}"):
        lowkiq.settings.workers = [LaterBroken]


def test_a_bad_shards_count_is_rejected_when_first_used(redis_client):
    class LaterBroken(lowkiq.Worker):
        pass

    LaterBroken.shards_count = 0
    with pytest.raises(ConfigurationError, match="shards_count"):
        LaterBroken.perform_async([{"id": 1}])
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize(
    ("attribute", "value"), [("batch_size", 0), ("track_length", 0), ("group_weights", {"a": -1})]
)
def test_an_attribute_broken_after_an_enqueue_fails_the_next_one(redis_client, attribute, value):
    class LaterBroken(lowkiq.Worker):
        group_weights = {"a": 1.0}

    LaterBroken.perform_async([{"id": 1}])
    good = getattr(LaterBroken, attribute)
    if attribute == "group_weights":
        LaterBroken.group_weights["a"] = -1  # changed in place
    else:
        setattr(LaterBroken, attribute, value)
    with pytest.raises(ConfigurationError, match=attribute):
        LaterBroken.perform_async([{"id": 2}])
    if attribute == "group_weights":
        LaterBroken.group_weights["a"] = 1.0
    else:
        setattr(LaterBroken, attribute, good)
    assert [job["id"] for job in LaterBroken.queries().range_by_id("-", "+")] == ["1"]


def test_an_enqueue_follows_a_changed_queue_name_and_serializer(redis_client):
    class Renamed(lowkiq.Worker):
        pass

    Renamed.perform_async([{"id": 1, "payload": "a"}])
    Renamed.queue_name = "Renamed2"
    Renamed.perform_async([{"id": 2, "payload": "b"}])
    lowkiq.settings.dump_payload = lambda payload: '"' + payload.upper() + '"'
    Renamed.perform_async([{"id": 3, "payload": "c"}])
    assert [job["id"] for job in Renamed.queries().range_by_id("-", "+")] == ["2", "3"]
    assert Renamed.queries().fetch(["3"])[0]["payloads"][0][0] == "C"
    Renamed.queue_name = "Renamed"
    assert [job["id"] for job in Renamed.queries().range_by_id("-", "+")] == ["1"]


@pytest.mark.parametrize("name", ["", "a{b}", 5])
def test_a_bad_queue_name_is_rejected(redis_client, name):
    with pytest.raises(ConfigurationError, match="queue_name"):
        type("BadName", (lowkiq.Worker,), {"queue_name": name})


# -- client middlewares and overriding perform_async -----------------------------------


def test_client_middlewares_run_outermost_first_and_see_the_worker(worker):
    calls = []

    def outer(w, jobs, call_next):
        calls.append(("outer", w, len(jobs)))
        call_next(w, jobs)
        calls.append(("outer done", w, len(jobs)))

    def inner(w, jobs, call_next):
        calls.append(("inner", w, len(jobs)))
        call_next(w, jobs)

    lowkiq.settings.client_middlewares = [outer, inner]
    worker.perform_async([GOOD])
    assert calls == [("outer", worker, 1), ("inner", worker, 1), ("outer done", worker, 1)]
    assert queued_ids(worker) == ["good"]


def test_a_client_middleware_can_modify_the_jobs(worker):
    def tag(w, jobs, call_next):
        call_next(w, [dict(job, payload={"tagged": job.get("payload")}) for job in jobs])

    def add(w, jobs, call_next):
        call_next(w, [*jobs, {"id": "audit", "payload": len(jobs)}])

    lowkiq.settings.client_middlewares = [add, tag]
    worker.perform_async([{"id": 1, "payload": "p"}])
    jobs = {job["id"]: job["payloads"][0][0] for job in worker.queries().fetch([1, "audit"])}
    assert jobs == {"1": {"tagged": "p"}, "audit": {"tagged": 1}}


def test_a_client_middleware_can_stop_the_enqueue(worker, redis_client):
    def drop_all(w, jobs, call_next):
        return None

    lowkiq.settings.client_middlewares = [drop_all]
    worker.perform_async([GOOD])
    assert redis_client.dbsize() == 0


def test_jobs_from_middlewares_are_validated_too(worker, redis_client):
    lowkiq.settings.client_middlewares = [lambda w, jobs, call_next: call_next(w, [{"x": 1}])]
    with pytest.raises(InvalidJob):
        worker.perform_async([GOOD])
    assert redis_client.dbsize() == 0


def test_perform_async_overridden_to_derive_id_and_score_from_the_payload(redis_client):
    class OrderUpdates(lowkiq.Worker):
        shards_count = 2

        @classmethod
        def perform_async(cls, jobs):
            return super().perform_async(
                [
                    {"id": job["payload"]["order"], "payload": job["payload"],
                     "score": job["payload"]["version"]}
                    for job in jobs
                ]
            )  # fmt: skip

    lowkiq.settings.workers = [OrderUpdates]
    seen = []
    lowkiq.settings.client_middlewares = [lambda w, jobs, n: (seen.append(w), n(w, jobs))]
    OrderUpdates.perform_async(
        [
            {"payload": {"order": 7, "version": 2}},
            {"payload": {"order": 7, "version": 1}},
            {"payload": {"order": 8, "version": 5}},
        ]
    )
    jobs = OrderUpdates.queries().fetch([7, 8])
    assert [(job["id"], [score for _, score in job["payloads"]]) for job in jobs] == [
        ("7", [1.0, 2.0]),
        ("8", [5.0]),
    ]
    assert seen == [OrderUpdates]


# -- Redis down ----------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_perform_async_raises_redis_unavailable_on_a_closed_port(worker):
    port = closed_port()
    no_retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    lowkiq.settings.redis = lambda: redis.Redis(host="127.0.0.1", port=port, retry=no_retry)
    with pytest.raises(RedisUnavailable) as caught:
        worker.perform_async([GOOD])
    assert isinstance(caught.value, LowkiqError)


def test_perform_async_raises_redis_unavailable_on_a_missing_socket(worker, tmp_path):
    url = f"unix://{tmp_path / 'missing.sock'}"
    lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
    with pytest.raises(RedisUnavailable, match="not enqueued"):
        worker.perform_async([GOOD])
