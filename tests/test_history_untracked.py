"""Reading the job events of a worker whose ``track`` is off is an error that says so,
not an empty history that looks like a job without events."""

from __future__ import annotations

import pytest

import lowkiq
from lowkiq.errors import ConfigurationError


@pytest.fixture
def untracked(redis_client):
    class OrderWorker(lowkiq.Worker):
        shards_count = 1

        @classmethod
        def perform(cls, payloads_by_id):
            pass

    lowkiq.settings.workers = [OrderWorker]
    OrderWorker.perform_async([{"id": 1, "payload": "paid"}])
    return OrderWorker


def test_history_of_an_untracked_worker_says_track_is_off(untracked):
    with pytest.raises(ConfigurationError) as raised:
        untracked.history(1)

    message = str(raised.value)
    assert "OrderWorker.history" in message and "OrderWorker.track is off" in message
    assert "track = True" in message


def test_events_of_an_untracked_worker_says_track_is_off(untracked):
    with pytest.raises(ConfigurationError, match=r"OrderWorker.events: OrderWorker.track is off"):
        lowkiq.events(untracked)


def test_a_tracked_worker_without_events_of_an_id_has_an_empty_history(redis_client):
    class TrackedWorker(lowkiq.Worker):
        shards_count = 1
        track = True

    lowkiq.settings.workers = [TrackedWorker]
    TrackedWorker.perform_async([{"id": 1, "payload": "paid"}])

    assert TrackedWorker.history(2) == []
    assert [event.event for event in TrackedWorker.history(1)] == ["enqueued"]
    assert [event.id for event in lowkiq.events(TrackedWorker)] == ["1"]
