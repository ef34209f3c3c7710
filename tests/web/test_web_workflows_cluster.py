"""The Workflows pages, ``lowkiq workflows`` and the job page's workflows on a single
server and on a Redis Cluster (a workflow's keys, the index and each member's shard live
in slots of their own)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from web_support import post
from workflow_pages_support import Steps, failed_workflow, pending_workflow, register

import lowkiq
from lowkiq.cli import main
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)


def test_pages_cli_and_cancel_on_either_redis(client):
    register()
    failed_workflow("wf-bad")
    pending_workflow("wf-run", jobs=4)
    listed = client.get("/workflows").get_data(as_text=True)
    assert re.findall(r'data-workflow="([^"]*)" data-status="([^"]*)"', listed) == [
        ("wf-run", "closed"),
        ("wf-bad", "failed"),
    ]
    html = client.get("/workflow?id=wf-run").get_data(as_text=True)
    assert len(re.findall(r"<li data-member=", html)) == 4
    (job,) = Steps.queries().fetch(["wf-run-0"])
    assert job["workflows"] == ["wf-run"]
    shown = json.loads(CliRunner().invoke(main, ["workflows", "wf-run", "--json"]).output)
    assert shown["counts"]["pending"] == 4 and len(shown["held_calls"]) == 1
    response = post(client, "/workflow/cancel", {"id": "wf-run"})
    assert "4 queued member payloads deleted" in response.get_data(as_text=True)
    status = lowkiq.workflow("wf-run").status()
    assert status.complete and status.discarded == 4 and Steps.metrics()["length"] == 0
