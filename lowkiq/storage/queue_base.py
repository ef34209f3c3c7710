"""What every use of one queue's storage shares: its client, its layout in Redis
(where its shards are), its key prefixes and scripts, and how a script runs (fenced
by a shard's lease, waiting for replicas when asked).

:class:`~lowkiq.storage.queue.Queue` adds enqueueing
(:mod:`lowkiq.storage.enqueueing`) and the processing lifecycle
(:mod:`lowkiq.storage.processing`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import redis

from lowkiq.clients.connection import Client, is_cluster
from lowkiq.errors import LeaseLost, StaleBatch
from lowkiq.serializers import Codec
from lowkiq.storage import layout as layouts
from lowkiq.storage import workflow_tags as tags
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.layout import Layout
from lowkiq.storage.scripts import Scripts, run_pipelined, run_replicated

log = logging.getLogger("lowkiq.storage")


@dataclass(frozen=True)
class Replication:
    """How many replicas a write must reach (Redis WAIT), and for how long to wait."""

    replicas: int
    timeout_ms: int


def _fenced(exc: redis.ResponseError) -> bool:
    return str(exc).startswith("FENCED")


def _stale(exc: redis.ResponseError) -> bool:
    return str(exc).startswith("STALE")


class _Prefixes(dict[int, str]):
    """Shard number -> the shard's key prefix, built on first use."""

    def __init__(self, queue_keys: QueueKeys) -> None:
        super().__init__()
        self.queue_keys = queue_keys

    def __missing__(self, shard: int) -> str:
        prefix = self[shard] = self.queue_keys.prefix(shard)
        return prefix


class QueueBase:
    """The storage of one worker's queue, bound to one Redis client.

    ``shards_count`` is the class's; the queue's layout in Redis
    (:mod:`lowkiq.storage.layout`, written from it at the queue's first use,
    changed only by a reshard) says where its shards are.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        shards_count: int,
        codec: Codec | None = None,
        replication: Replication | None = None,
        layout: Layout | None = None,
        max_restores: int = 0,
        track_length: int = 0,
    ) -> None:
        self.client = client
        self.name = name
        #: The class's ``shards_count``: the layout written when Redis has none yet.
        self.default_shards_count = shards_count
        self._layout = layout
        self.codec = codec or Codec()
        self.keys = QueueKeys(name)
        #: With ``Worker.track``, its ``track_length``: the scripts record each job event
        #: in the shard's events stream, capped at about that many entries (0: off).
        self.track_length = track_length
        self.scripts = Scripts.for_client(client, track_length)
        self._prefixes = _Prefixes(self.keys)
        #: Whether ``client`` talks to a Redis Cluster (each shard a slot of its own).
        self.cluster = is_cluster(client)
        # A processing thread's client runs scripts on its own connection (fast path).
        self._run_script = getattr(client, "run_script", None)
        #: With replicas to wait for, every write waits until they have it.
        self.replication = replication if replication and replication.replicas else None
        #: Whether :meth:`pop_command` packs pops: on a processing thread's client, when
        #: no write waits for replicas.
        self.pipelines_pops = self._run_script is not None and self.replication is None
        #: The worker's ``max_restores``: a new owner of a shard moves a job its previous
        #: owners died running that many times to the morgue (0: never).
        self.max_restores = max_restores

    @property
    def layout(self) -> Layout:
        """Where the queue's shards are (read from Redis at most every
        :data:`~lowkiq.storage.layout.MAX_AGE` seconds, unless given)."""
        if self._layout is not None:
            return self._layout
        return layouts.cached(self.client, self.name, self.default_shards_count)

    def refresh_layout(self, known: Layout | None = None) -> Layout:
        """Read the layout from Redis now (or take ``known``, just read) and keep it;
        returns it."""
        self._layout = known or layouts.read(self.client, self.name, self.default_shards_count)
        return self._layout

    @property
    def shards_count(self) -> int:
        """How many shards new jobs are spread over."""
        return self.layout.count

    @property
    def shards(self) -> range:
        """The numbers of every shard that may hold jobs (see :attr:`Layout.shards`)."""
        return self.layout.shards

    def shard_of(self, job_id: str) -> int:
        """The shard new jobs of ``job_id`` go to."""
        return self.layout.shard_of(job_id)

    def locator(self) -> Callable[[str], int]:
        """A function giving the shard an id's jobs are read and changed in: the one new
        jobs go to; during a reshard, the id's old shard until that one is emptied."""
        current = self.layout
        if current.previous is None:
            return current.shard_of
        old = Layout(*current.previous)
        emptied = {int(shard) for shard in self.client.smembers(self.keys.retired_set)}

        def located(job_id: str) -> int:
            shard = old.shard_of(job_id)
            return current.shard_of(job_id) if shard in emptied else shard

        return located

    def run(self, script_name: str, shard: int, *args: Any) -> Any:
        """Run one of the Lua scripts on ``shard`` with ``args`` as ``ARGV``."""
        script = getattr(self.scripts, script_name)
        return script(keys=[self.keys.prefix(shard)], args=args)

    def write(self, script_name: str, keys: list[str], *args: Any) -> Any:
        """Run a script that changes state; with :attr:`replication`, wait (Redis WAIT,
        same round trip) until enough replicas have the change."""
        script = getattr(self.scripts, script_name)
        if self.replication is None:
            if self._run_script is None:
                return script(keys=keys, args=args)
            return self._run_script(script, keys, args)
        wanted, timeout_ms = self.replication.replicas, self.replication.timeout_ms
        reply, acked = run_replicated(self.client, (script, keys, args), wanted, timeout_ms)
        if acked < wanted:
            log.warning(
                "%s: %s reached %d of %d replica(s) within %d ms; it is on the master only",
                self.name, script_name, acked, wanted, timeout_ms,
            )  # fmt: skip
        return reply

    def run_pipelined(
        self, calls: Sequence[tuple[str, int, Sequence[Any]]], transaction: bool = False
    ) -> list[Any]:
        """Run ``(script name, shard, args)`` calls in one round trip (see
        :func:`~lowkiq.storage.scripts.run_pipelined`); returns their replies."""
        return run_pipelined(
            self.client,
            [
                (getattr(self.scripts, name), [self.keys.prefix(shard)], args)
                for name, shard, args in calls
            ],
            transaction,
        )

    def run_fenced(self, script_name: str, shard: int, token: str, *args: Any) -> Any:
        """Run a script that needs the shard's lease; :class:`LeaseLost` when it is stale,
        :class:`StaleBatch` when the batch it names is no longer in processing."""
        try:
            return self.write(script_name, [self._prefixes[shard]], token, *args)
        except redis.ResponseError as exc:
            self.raise_refusal(exc, shard)

    def raise_refusal(self, error: redis.ResponseError, shard: int) -> NoReturn:
        """Raise a fenced script's error reply as what it says: :class:`LeaseLost` (the
        lease is not held), :class:`StaleBatch` (the batch it named is no longer in
        processing), or itself."""
        if _fenced(error):
            raise LeaseLost(f"{self.name}:{shard}: the lease is not held") from None
        if _stale(error):
            raise StaleBatch(str(error).removeprefix("STALE ")) from None
        raise error

    def load_pairs(self, pairs: Iterable[tuple[bytes, float]]) -> list[list[Any]]:
        """``[[payload, score], ...]`` of stored ``(payload bytes, score)`` pairs; a payload
        that cannot be decoded comes as :class:`~lowkiq.serializers.Undecodable`."""
        load = self.codec.payload_or_undecodable
        pairs = list(pairs)
        if any(payload.startswith(tags.MARK) for payload, _ in pairs):
            pairs = tags.untagged(pairs)[0]
        return [[load(payload), score] for payload, score in pairs]
