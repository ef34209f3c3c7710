"""A dispatcher serving every shard of a worker, its leases taken as a process would, for
tests that drive it turn by turn or run it on a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

import lowkiq
from lowkiq.clients.cluster import thread_client
from lowkiq.clients.connection import Client
from lowkiq.ownership.events import Grant, Mailbox, Released
from lowkiq.runtime.dispatcher import Dispatcher
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.storage.queue import Queue
from lowkiq.strategies.schedulers import LagScheduler, SeqScheduler
from tests.leasing import token


@contextmanager
def dispatcher_of(
    client: Client,
    worker: type[lowkiq.Worker],
    threads: int = 2,
    own: Client | None = None,
    **options: Any,
) -> Iterator[tuple[Dispatcher, Queue]]:
    """A dispatcher with ``threads`` executor threads (started) serving every shard of
    ``worker`` on a connection of its own (``own``, or a new thread client), and the
    queue its handlers use."""
    own = own or thread_client(client)
    queue = worker.queue(own)
    queue.refresh_layout(worker.queue(client).layout)
    dispatcher = Dispatcher(
        own,
        threads,
        options.pop("scheduler", LagScheduler()),
        options.pop("poll_interval", 1.0),
        threading.Event(),
        waker=client,
        **options,
    )
    for shard in queue.shards:
        dispatcher.tell(Grant(ShardHandler(worker, shard, queue, token(queue, shard))))
    dispatcher.apply()
    dispatcher.executor.start()
    try:
        yield dispatcher, queue
    finally:
        dispatcher.executor.stop()
        dispatcher.executor.join(5)
        own.close()


def turn_until(dispatcher: Dispatcher, done: Callable[[], bool], timeout: float = 10.0) -> None:
    """Turn ``dispatcher`` on this thread until ``done()``, trying again after a Redis
    error as its own loop does; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "condition not met in time"
        try:
            dispatcher.turn()
        except redis.RedisError:
            time.sleep(0.05)


def turn_for(dispatcher: Dispatcher, seconds: float) -> None:
    """Turn ``dispatcher`` on this thread for about ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        dispatcher.turn()


def collect_until(dispatcher: Dispatcher, done: Callable[[], bool], timeout: float = 10.0) -> None:
    """Settle the dispatcher's finished works (popping nothing) until ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "condition not met in time"
        dispatcher.collect()
        time.sleep(0.005)


def handler_of(dispatcher: Dispatcher, shard: int) -> ShardHandler:
    """The handler serving ``shard``."""
    return next(h for h in dispatcher.handlers + dispatcher.parked if h.shard == shard)


def ids_by_shard(queue: Queue, per_shard: int) -> dict[int, list[str]]:
    """``per_shard`` job ids of each shard of ``queue``."""
    ids: dict[int, list[str]] = {shard: [] for shard in queue.shards}
    number = 0
    while any(len(found) < per_shard for found in ids.values()):
        shard = queue.shard_of(str(number))
        if len(ids[shard]) < per_shard:
            ids[shard].append(str(number))
        number += 1
    return ids


def process(handler: ShardHandler) -> bool:
    """One pop of ``handler``'s shard, performed and settled on this thread by a dispatcher
    with no executor thread (as :func:`lowkiq.testing.drain` runs); ``False`` when it
    gave nothing to do.  Its finished batch waits for its ack, which rides on the next
    pop, as in a worker process."""
    dispatcher = Dispatcher(handler.queue.client, 0, SeqScheduler(), 0.0, threading.Event())
    dispatcher.tell(Grant(handler))
    dispatcher.apply()
    worked = dispatcher.round() > 0
    for _ in range(3):  # a suspect runs alone, in the round after its pop
        dispatcher.collect()
        if not dispatcher.in_flight:
            break
        dispatcher.round()
    return worked


class ReleasesInto(Mailbox[Released]):
    """A dispatcher's reports of released leases, their handlers appended to ``into``
    as they come (for a test to read)."""

    def __init__(self, into: list[Any]) -> None:
        super().__init__()
        self.into = into

    def post(self, item: Released) -> None:
        """Append the released handlers."""
        self.into.extend(item.handlers)
