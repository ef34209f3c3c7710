"""The eviction banner with a real ``lowkiq worker`` running under an evicting policy
(started with ``LOWKIQ_ALLOW_EVICTION=1``): it says that process runs, not that
workers refuse."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_web_eviction import banner, policy  # noqa: F401  (the fixture)

import lowkiq
from lowkiq_web import create_app, overview
from tests.apps.runner import WorkerProcess, eventually


@pytest.mark.usefixtures("policy")
def test_a_worker_running_with_allow_eviction_is_named_in_the_banner(
    worker_processes: Callable[..., WorkerProcess], recorder: type, monkeypatch
) -> None:
    worker_processes(LOWKIQ_ALLOW_EVICTION="1")
    eventually(lambda: len(lowkiq.processes().processes) == 1)
    monkeypatch.setattr(overview, "_policy_read", {"at": -overview.POLICY_TTL, "problem": None})
    assert lowkiq.settings.allow_eviction is False  # the web process's own setting
    shown = " ".join((banner(create_app().test_client()) or "").split())
    assert "maxmemory-policy allkeys-lru" in shown
    assert "1 worker process runs on it all the same (started with" in shown
    assert "settings.allow_eviction, or before the policy changed)" in shown
    assert "Workers refuse to start until then" not in shown
