"""Workflows on Redis 7, where lowkiq's scripts run as the functions of one library
(FCALL): every workflow script's path, from a block to its callbacks, a cancel, a held
call and a reuse of its id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.testing import drain
from tests.conftest import lowkiq_on
from tests.functions_support import REDIS_7, calls, required


class Member(lowkiq.Worker):
    shards_count = 3
    max_retry_count = 1

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for payloads in payloads_by_id.values():
            if "kill" in payloads:
                raise lowkiq.Kill(RuntimeError("dead"))
            if "discard" in payloads:
                raise lowkiq.Discard


class Callback(lowkiq.Worker):
    seen: list[dict[str, Any]] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.seen += [payload for payloads in payloads_by_id.values() for payload in payloads]


@pytest.fixture
def client7(tmp_path: Path) -> Iterator[redis.Redis]:
    server = start_server(tmp_path, binary=required(REDIS_7, "Redis 7"))
    try:
        with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
            Callback.seen = []
            yield client
    finally:
        server.stop()


def test_a_workflow_runs_as_functions_from_its_block_to_its_callbacks(
    client7: redis.Redis,
) -> None:
    with lowkiq.Workflow("fn", on_complete=Callback, on_success=Callback, payload=1) as wf:
        Member.perform_async([{"id": str(n), "payload": n} for n in range(20)])
        Member.perform_async([{"id": "k", "payload": "kill"}, {"id": "d", "payload": "discard"}])
    drain(Member)
    assert wf.status() == lowkiq.WorkflowStatus(done=20, dead=1, discarded=1, complete=True)
    Member.perform_async([{"id": "later"}], after="fn")  # failed: held
    assert len(lowkiq.workflow("fn").held()) == 1
    assert Member.actions().release_held("fn") == 1
    with lowkiq.Workflow("fn", on_complete=Callback) as again:  # complete: reused
        Member.perform_async([{"id": "x", "payload": 1, "delay": 3600}])
    assert again.cancel() == 1
    drain(Callback)
    assert sorted(payload["status"]["dead"] for payload in Callback.seen) == [0, 1]
    assert calls(client7, "fcall") > 0 and calls(client7, "evalsha") == 0
