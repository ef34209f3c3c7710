"""The cost markers tests/conftest.py gives each test (``unit``, ``redis``, ``process``,
``cluster``, ``browser``): exactly one per test, the most expensive that applies, and
``-m unit`` selects tests that need neither Redis nor a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.apps.runner import ROOT
from tests.conftest import COST_MARKERS

#: Collects the suite in a fresh interpreter with ``-m unit`` and writes each test's cost
#: markers as JSON, and which tests that selected (those it did not select are reported
#: as deselected: every test is in one of the two).
COLLECT = """
import json, sys
import pytest

class Report:
    def __init__(self):
        self.deselected = []

    def pytest_deselected(self, items):
        self.deselected += items

    def pytest_collection_finish(self, session):
        costs = {
            item.nodeid: [m.name for m in item.iter_markers() if m.name in sys.argv[2:]]
            for item in session.items + self.deselected
        }
        selected = [item.nodeid for item in session.items]
        with open(sys.argv[1], "w") as out:
            json.dump({"costs": costs, "unit": selected}, out)

sys.exit(pytest.main(
    ["--collect-only", "-q", "-p", "no:cacheprovider", "-m", "unit", "tests"], [Report()]
))
"""

#: Tests whose tier is known, each for a different reason.
KNOWN = {
    # No fixture of Redis, and a CLI run in-process (click's runner), not as a process.
    "tests/cli/test_cli.py::test_version_and_help": "unit",
    # Its neighbours start interpreters; this one reads the sources.
    "tests/test_imports.py::test_no_module_imports_in_a_cycle": "unit",
    "tests/test_serializers.py::test_default_json_is_canonical": "unit",
    # The Redis fixture reached through a module's fixture (the dashboard's client), on the
    # single server and on the cluster (tests/both_redis.py).
    "tests/web/test_web_pages.py::test_per_page_choices[server]": "redis",
    "tests/web/test_web_pages.py::test_per_page_choices[cluster]": "cluster",
    "tests/test_serializers.py::test_custom_payload_serializer_is_used_to_store_and_load": "redis",
    # `lowkiq worker` processes through the workers fixture.
    "tests/test_crash.py::test_sigterm_during_a_batch_finishes_it_and_exits_0": "process",
    # A subprocess.run in a helper the test calls.
    "tests/cli/test_cli.py::test_the_worker_command_does_not_load_the_dashboard": "process",
    # A private Redis server started by the test itself.
    "tests/test_embedded.py::test_start_server_gives_a_working_redis_of_at_least_6_2": "process",
    # Under tests/cluster, and the cluster fixture outside it (ahead of its processes).
    "tests/cluster/test_cluster_connection.py::test_moved_and_ask_redirections_are_followed": (
        "cluster"
    ),
    "tests/test_reshard.py::test_reshard_under_load_on_a_cluster": "cluster",
    # The browser fixtures, ahead of the Redis the page reads.
    "tests/web/test_web_browser.py::test_pause_stops_the_refresh": "browser",
}

PURE = "tests/test_serializers.py::test_default_json_is_canonical"
USES_REDIS = "tests/web/test_web_pages.py::test_per_page_choices[server]"


def clean_env() -> dict[str, str]:
    """The environment without options a developer may have set for the outer run."""
    return {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each collected test's cost markers, and the tests ``-m unit`` selects, from one
    collection in a fresh interpreter."""
    out = tmp_path_factory.mktemp("markers") / "costs.json"
    subprocess.run(
        [sys.executable, "-c", COLLECT, str(out), *COST_MARKERS],
        cwd=ROOT,
        env=clean_env(),
        check=True,
        capture_output=True,
        timeout=120,
    )
    found: dict[str, Any] = json.loads(Path(out).read_text())
    return found


@pytest.fixture(scope="module")
def costs(collected: dict[str, Any]) -> dict[str, list[str]]:
    """Each collected test's cost markers."""
    found: dict[str, list[str]] = collected["costs"]
    return found


def test_every_test_has_exactly_one_cost_marker(costs: dict[str, list[str]]) -> None:
    assert len(costs) > 100
    wrong = {nodeid: found for nodeid, found in costs.items() if len(found) != 1}
    assert not wrong


@pytest.mark.parametrize(("nodeid", "tier"), KNOWN.items(), ids=list(KNOWN))
def test_a_known_test_is_in_its_tier(costs: dict[str, list[str]], nodeid: str, tier: str) -> None:
    assert nodeid in costs, f"{nodeid} is no longer collected: name another test of its kind"
    assert costs[nodeid] == [tier]


def test_the_unit_tier_selects_pure_tests_only(collected: dict[str, Any]) -> None:
    selected = set(collected["unit"])
    assert PURE in selected
    assert USES_REDIS not in selected
    assert len(selected) < len(collected["costs"])
    assert all(collected["costs"][nodeid] == ["unit"] for nodeid in selected)


def test_the_cost_markers_are_registered_and_a_typo_fails(pytestconfig: pytest.Config) -> None:
    registered = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert set(COST_MARKERS) <= registered
    assert pytestconfig.getoption("strict_markers")
