"""Prometheus: ``lowkiq_workflows_completed_total{result}`` counts each workflow once, when
it completes (its last member ends, its block ends with every member ended, or a cancel
ends it), and ``lowkiq_workflows_open`` the workflows not yet complete."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families
from workflow_pages_support import (
    Steps,
    failed_workflow,
    pending_workflow,
    register,
    succeeded_workflow,
)

import lowkiq
from lowkiq.telemetry import prometheus
from lowkiq.workflows import relay


def workflow_samples() -> dict[tuple[str, str], float]:
    """The workflow samples of a scrape: (name, result label) -> value."""
    text = prometheus.render()[0].decode()
    return {
        (sample.name, sample.labels.get("result", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("lowkiq_workflows_")
    }


def figures() -> tuple[float, float, float]:
    """(succeeded, failed, open)."""
    samples = workflow_samples()
    return (
        samples[("lowkiq_workflows_completed_total", "succeeded")],
        samples[("lowkiq_workflows_completed_total", "failed")],
        samples[("lowkiq_workflows_open", "")],
    )


def test_completions_are_counted_once_by_result_and_open_ones_gauged(workers, client):
    register()
    assert figures() == (0, 0, 0)
    succeeded_workflow("wf-ok")  # completed by the relay of its last member
    failed_workflow("wf-bad")
    with lowkiq.Workflow("wf-empty"):  # complete as its block ends
        pass
    assert figures() == (2, 1, 0)
    pending_workflow("wf-run", jobs=2)
    assert figures() == (2, 1, 1)
    lowkiq.workflow("wf-run").cancel()  # completed by the cancel: not succeeded
    assert figures() == (2, 2, 0)
    # What a crash would make run again (a relay, the sweep, fire) counts nothing more.
    client_ = lowkiq.settings.client()
    for shard in range(Steps.shards_count):
        relay.relay(client_, Steps.queue_name, shard)
    relay.sweep(client_, time.time() + 3600)
    for workflow_id in ("wf-ok", "wf-bad", "wf-empty", "wf-run"):
        relay.fire(client_, workflow_id)
    assert figures() == (2, 2, 0)
    scraped = client.get("/metrics").get_data(as_text=True)
    assert 'lowkiq_workflows_completed_total{result="succeeded"} 2.0' in scraped
    assert "lowkiq_workflows_open 0.0" in scraped
