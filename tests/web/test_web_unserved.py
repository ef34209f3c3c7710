"""The banner of every page when a worker has shards no live process serves while jobs
wait in them (issue 30); read at most once every few seconds per web process."""

from __future__ import annotations

import re

from web_support import MailWorker, OrderWorker, enqueue

import lowkiq
from lowkiq.ownership import leases
from lowkiq.ownership.membership import Membership
from lowkiq_web import unserved

PROCESS = "host:1:abc"
PAGES = (
    "/",
    "/processes",
    "/schedules",
    "/history",
    "/OrderWorker/enqueued",
    "/OrderWorker/dead",
    "/OrderWorker/history",
    "/MailWorker/busy",
    "/OrderWorker/job?id=j0000",
)


def banner(client, path: str = "/") -> list[str]:
    """The banner's lines about workers (none without the banner)."""
    page = client.get(path).get_data(as_text=True)
    found = re.search(r'<div class="flash banner-unserved" role="alert">(.*?)</div>', page, re.S)
    if found is None:
        return []
    return re.findall(r'<p data-worker="[^"]+">⚠ ([^<]*)</p>', found.group(1))


def live_process(redis_client, shards: list[int]) -> None:
    """A live process (its membership beat) holding the leases of ``shards`` of OrderWorker."""
    membership = Membership(redis_client, PROCESS, 30.0)
    membership.beat(4, {OrderWorker.queue_name: range(OrderWorker.shards_count)}, {})
    queue = OrderWorker.queue()
    for shard in shards:
        lease, _, _ = leases.acquire(queue, shard, PROCESS, 30.0)
        assert lease is not None


def test_every_page_says_which_shards_no_live_process_serves(client):
    enqueue(OrderWorker, 12)  # over the 3 shards; MailWorker has no job: not named
    expected = ["OrderWorker: 3 of 3 shards have no live process (12 jobs waiting)"]
    for path in PAGES:
        assert banner(client, path) == expected, path
    page = client.get("/").get_data(as_text=True)
    assert 'see <a href="/processes">Processes</a>' in page


def test_no_banner_without_waiting_jobs_or_when_a_live_process_holds_every_shard(
    client, redis_client
):
    assert banner(client) == []  # nobody serves, but nothing waits
    unserved.reset()
    enqueue(OrderWorker, 12)
    live_process(redis_client, [0, 1, 2])
    assert banner(client) == []
    for path in PAGES:
        assert 'class="flash banner-unserved"' not in client.get(path).get_data(as_text=True)


def test_the_banner_counts_only_the_unserved_shards_and_their_jobs(client, redis_client):
    ids = enqueue(OrderWorker, 30)
    enqueue(MailWorker, 1)
    live_process(redis_client, [0, 2])
    waiting = sum(1 for job_id in ids if OrderWorker.queue().shard_of(job_id) == 1)
    assert banner(client) == [
        f"OrderWorker: 1 of 3 shards has no live process ({waiting} jobs waiting)",
        "MailWorker: 1 of 1 shard has no live process (1 job waiting)",
    ]


def test_a_lease_held_by_no_live_process_does_not_serve(client):
    enqueue(OrderWorker, 3)
    queue = OrderWorker.queue()
    for shard in range(3):  # a lapsed owner: no membership entry
        assert leases.acquire(queue, shard, "gone-host:9:dead", 30.0)[0] is not None
    assert banner(client) == ["OrderWorker: 3 of 3 shards have no live process (3 jobs waiting)"]


def test_the_owners_are_read_once_per_ttl(client, redis_client, monkeypatch):
    calls = []
    read = lowkiq.processes

    def counted():
        calls.append(1)
        return read()

    monkeypatch.setattr(unserved.lowkiq, "processes", counted)
    enqueue(OrderWorker, 3)
    for path in ("/", "/schedules", "/history", "/OrderWorker/enqueued"):
        assert len(banner(client, path)) == 1
    assert len(calls) == 1
    live_process(redis_client, [0, 1, 2])
    assert len(banner(client)) == 1  # still the reading of less than TTL ago
    monkeypatch.setattr(unserved, "_read", {**unserved._read, "at": -unserved.TTL})
    assert banner(client) == [] and len(calls) == 2
