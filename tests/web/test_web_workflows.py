"""The Workflows pages (SPEC §12): the list, a workflow's page, its actions, and the job
page naming its workflows; their 400s and 404s, which change nothing."""

from __future__ import annotations

import re

import pytest
from web_support import post
from workflow_pages_support import (
    Finished,
    Report,
    Steps,
    failed_workflow,
    pending_workflow,
    register,
    succeeded_workflow,
)

import lowkiq
from lowkiq.testing import drain
from lowkiq.workflows import store
from lowkiq_web import create_app


@pytest.fixture(autouse=True)
def workflow_workers(workers):
    """Steps, Finished and Report in ``settings.workers`` on the flushed Redis."""
    register()


def rows(html: str) -> list[tuple[str, str]]:
    """The list's rows: ``(workflow id, status)``, in order."""
    return re.findall(r'<tr class="workflow" data-workflow="([^"]*)" data-status="([^"]*)">', html)


def count_of(html: str, name: str) -> str:
    """The exact figure of the first ``data-count=name`` cell or span of a page."""
    found = re.search(rf'data-count="{name}">[^<]*(?:<b>)?<span class="num" title="([^"]*)"', html)
    assert found, f"no {name} count"
    return found.group(1)


def section(html: str, label: str) -> str:
    found = re.search(rf'<section[^>]*aria-label="{label}">.*?</section>', html, re.S)
    assert found, f"no {label} section"
    return found.group(0)


def test_the_list_shows_each_workflow_newest_first_with_its_status_and_counts(client):
    succeeded_workflow("wf-ok", jobs=3)
    failed_workflow("wf-bad")
    pending_workflow("wf-run", jobs=4)
    html = client.get("/workflows").get_data(as_text=True)
    assert rows(html) == [("wf-run", "closed"), ("wf-bad", "failed"), ("wf-ok", "succeeded")]
    run = re.search(r'data-workflow="wf-run".*?</tr>', html, re.S).group(0)
    assert (count_of(run, "pending"), count_of(run, "total"), count_of(run, "held")) == (
        "4",
        "4",
        "1",
    )
    bad = re.search(r'data-workflow="wf-bad".*?</tr>', html, re.S).group(0)
    assert [count_of(bad, n) for n in ("done", "dead", "pending", "total")] == ["1", "1", "0", "2"]
    assert 'href="/workflow?id=wf-ok"' in html
    assert re.search(r'aria-current="page"[^>]*>Workflows</a>', html)  # the nav's page shown
    assert "Workflows</a>" in client.get("/").get_data(as_text=True)


def test_the_list_pages_through_the_workflows(client):
    for n in range(5):
        with lowkiq.Workflow(f"wf-{n}"):
            pass
    first = client.get("/workflows?limit=2").get_data(as_text=True)
    assert [i for i, _ in rows(first)] == ["wf-4", "wf-3"]
    assert "page 1 of 3 (5 workflows)" in first and "?page=2&amp;limit=2" in first
    last = client.get("/workflows?page=3&limit=2").get_data(as_text=True)
    assert [i for i, _ in rows(last)] == ["wf-0"] and "?page=2&amp;limit=2" in last
    past = client.get("/workflows?page=9&limit=2")
    assert past.status_code == 200 and "No workflows on page 9" in past.get_data(as_text=True)


def test_without_workflows_the_list_says_how_to_open_one(client):
    html = client.get("/workflows").get_data(as_text=True)
    assert rows(html) == [] and "No workflows yet" in html


@pytest.mark.parametrize(
    "query, message",
    [
        ("page=0", "page must be an integer &gt;= 1"),
        ("page=x", "page must be an integer &gt;= 1"),
        ("limit=-1", "limit must be an integer &gt;= 1"),
        ("limit=501", "limit must be at most 500"),
        ("limit=%EF%BC%91", "limit must be an integer"),  # a full-width digit
    ],
)
def test_a_bad_list_parameter_is_a_400_with_its_message(client, query, message):
    response = client.get(f"/workflows?{query}")
    assert response.status_code == 400
    assert message in response.get_data(as_text=True)


def test_a_workflows_page_shows_counts_members_callbacks_and_held_calls(client):
    failed_workflow("wf-bad")
    pending_workflow("wf-run", jobs=3)
    html = client.get("/workflow?id=wf-bad").get_data(as_text=True)
    assert 'data-workflow-status="failed"' in html
    assert (count_of(html, "done"), count_of(html, "dead"), count_of(html, "total")) == (
        "1",
        "1",
        "2",
    )
    members = section(html, "Members")
    assert re.findall(r'data-state="(\w+)"', members) == ["done", "dead"]
    assert 'href="/Steps/job?id=wf-bad-dies"' in members
    callbacks = section(html, "Callbacks")
    assert re.findall(r'data-callback="(\w+)"', callbacks) == ["on_complete", "on_success"]
    assert 'data-fired="yes"' in callbacks and 'href="/Finished/job?id=wf-bad"' in callbacks
    assert "never will: the workflow did not succeed" in callbacks
    assert 'data-action="cancel-workflow"' not in html  # complete: nothing to cancel

    run = client.get("/workflow?id=wf-run").get_data(as_text=True)
    assert 'data-workflow-status="closed"' in run and count_of(run, "pending") == "3"
    assert re.findall(r'data-state="(\w+)"', section(run, "Members")) == ["pending"]
    held = section(run, "Held calls")
    assert "<td>Report</td>" in held and "<code>after-1</code>, <code>after-2</code>" in held
    assert re.findall(r'data-fired="(\w+)"', section(run, "Callbacks")) == ["no", "no"]
    for action in ("cancel-workflow", "release-held", "delete-held"):
        assert f'data-action="{action}"' in run


def test_the_members_shown_per_state_are_limited(client):
    pending_workflow("wf-run", jobs=5)
    html = client.get("/workflow?id=wf-run&limit=2").get_data(as_text=True)
    assert len(re.findall(r"<li data-member=", html)) == 2
    assert "… 3 more" in html and "limit=5" in html


def test_an_unknown_workflow_is_a_404_and_a_bad_parameter_a_400(client):
    missing = client.get("/workflow?id=nope")
    assert missing.status_code == 404 and "no workflow &#39;nope&#39;" in missing.get_data(
        as_text=True
    )
    assert client.get("/workflow").status_code == 400
    assert client.get("/workflow?id=").status_code == 400
    pending_workflow("wf-run")
    response = client.get("/workflow?id=wf-run&limit=0")
    assert response.status_code == 400 and "limit must be an integer" in response.get_data(
        as_text=True
    )
    assert client.get("/workflow?id=wf-run&limit=1001").status_code == 400


def test_cancel_deletes_the_queued_members_and_completes_it_cancelled(client):
    pending_workflow("wf-run", jobs=4)
    response = post(client, "/workflow/cancel", {"id": "wf-run"})
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "Workflow wf-run cancelled: 4 queued member payloads deleted." in html
    assert 'data-workflow-status="cancelled"' in html and count_of(html, "discarded") == "4"
    assert Steps.metrics()["length"] == 0
    status = lowkiq.workflow("wf-run").status()
    assert status.complete and not status.succeeded and status.discarded == 4
    drain(Finished)
    assert [job_id for job_id, _ in Finished.calls] == ["wf-run"]  # on_complete ran
    assert Report.metrics()["length"] == 0  # on_success did not, the held jobs stay held
    again = post(client, "/workflow/cancel", {"id": "wf-run"})
    assert again.status_code == 400 and "is cancelled: nothing to cancel" in again.get_data(
        as_text=True
    )


def test_release_held_enqueues_the_held_jobs_and_delete_held_drops_them(client):
    pending_workflow("wf-run")
    response = post(client, "/workflow/release-held", {"id": "wf-run"})
    assert "1 held call of wf-run enqueued." in response.get_data(as_text=True)
    assert sorted(job["id"] for job in Report.queries().range_by_id("-", "+", 10)) == [
        "after-1",
        "after-2",
    ]
    assert lowkiq.workflow("wf-run").held() == []
    pending_workflow("wf-two")
    response = post(client, "/workflow/delete-held", {"id": "wf-two"})
    assert "1 held call of wf-two deleted." in response.get_data(as_text=True)
    assert lowkiq.workflow("wf-two").held() == []
    drain(Steps)
    # The released two, and on_success of both (their held calls are gone: none moves on).
    assert Report.metrics()["length"] == 2 + 2


def test_a_plain_form_post_is_redirected_to_the_workflow_page(client):
    pending_workflow("wf-run")
    response = post(client, "/workflow/delete-held", {"id": "wf-run"}, htmx=False)
    assert response.status_code == 303 and response.headers["Location"].endswith(
        "/workflow?id=wf-run"
    )


def test_bad_actions_are_refused_and_change_nothing(client):
    pending_workflow("wf-run")
    assert post(client, "/workflow/cancel", {"id": "nope"}).status_code == 404
    assert post(client, "/workflow/release-held", {"id": "nope"}).status_code == 404
    assert post(client, "/workflow/cancel", {}).status_code == 400
    assert post(client, "/workflow/explode", {"id": "wf-run"}).status_code == 404
    bad_limit = post(client, "/workflow/cancel", {"id": "wf-run", "limit": "x"})
    assert bad_limit.status_code == 400
    assert client.post("/workflow/cancel", data={"id": "wf-run"}).status_code == 403  # no CSRF
    assert client.get("/workflow/cancel").status_code == 405
    status = lowkiq.workflow("wf-run").status()
    assert (status.pending, status.discarded) == (4, 0) and len(
        lowkiq.workflow("wf-run").held()
    ) == 1


def test_read_only_hides_and_refuses_the_actions(workers):
    register()
    pending_workflow("wf-run")
    client = create_app(read_only=True).test_client()
    html = client.get("/workflow?id=wf-run").get_data(as_text=True)
    assert "data-action=" not in html
    assert post(client, "/workflow/cancel", {"id": "wf-run"}).status_code == 403
    assert lowkiq.workflow("wf-run").status().pending == 4


def test_the_job_page_names_the_workflows_of_a_job(client):
    pending_workflow("wf-a", jobs=1)
    with lowkiq.Workflow("wf-b"):
        Steps.perform_async([{"id": "wf-a-0", "payload": "more"}])
    (job,) = Steps.queries().fetch(["wf-a-0"])
    assert job["workflows"] == ["wf-a", "wf-b"]
    assert [p for p, _ in job["payloads"]] == [0, "more"]  # tags off
    html = client.get("/Steps/job?id=wf-a-0").get_data(as_text=True)
    found = re.search(r'<dd class="job-workflows"[^>]*>(.*?)</dd>', html, re.S)
    assert found, "no Workflows on the job page"
    assert re.findall(r'href="/workflow\?id=([^"]+)"', found.group(1)) == ["wf-a", "wf-b"]
    Steps.perform_async([{"id": "plain", "payload": 1}])
    (plain,) = Steps.queries().fetch(["plain"])
    assert "workflows" not in plain
    assert "job-workflows" not in client.get("/Steps/job?id=plain").get_data(as_text=True)


def test_a_tracked_callbacks_history_says_which_workflow_enqueued_it(client):
    with lowkiq.Workflow("wf-ok", on_complete=Finished):
        Steps.perform_async([{"id": "s-1", "payload": 1}])
    Finished.perform_async([{"id": "held-job", "payload": 1}], after="wf-ok")
    drain(Steps)
    (callback,) = [e for e in Finished.history("wf-ok") if e.event == "enqueued"]
    assert callback.details["once"].startswith("wf:wf-ok:")
    assert callback.details["once"].endswith(":complete")
    (released,) = [e for e in Finished.history("held-job") if e.event == "enqueued"]
    assert released.details["once"].startswith("held:")
    html = client.get("/Finished/job?id=wf-ok").get_data(as_text=True)
    assert "Enqueued by workflow wf-ok (its on_complete callback)" in html
    held_page = client.get("/Finished/job?id=held-job").get_data(as_text=True)
    assert "Enqueued after= its workflows" in held_page


def test_an_open_workflows_page_says_its_members_are_not_registered_yet(client):
    with lowkiq.Workflow("wf-open", on_complete=Finished):
        Steps.perform_async([{"id": "o-1", "payload": 1}])
        html = client.get("/workflow?id=wf-open").get_data(as_text=True)
        listed = client.get("/workflows").get_data(as_text=True)
    assert 'data-workflow-status="open"' in html and rows(listed) == [("wf-open", "open")]
    assert count_of(listed, "total") == "0"  # members are registered as the block ends
    assert "Not registered yet" in html
    assert "It is still open (its with block runs)" in html  # the cancel's question


def test_an_open_workflows_page_shows_the_members_that_ended_so_far_by_state(client):
    with lowkiq.Workflow("wf-open", on_complete=Finished):
        Steps.perform_async([{"id": "o-ok", "payload": 1}])
        drain(Steps)  # a batch of its own: done
        Steps.perform_async([{"id": "o-dies", "payload": {"fail": 1}}])
        drain(Steps)  # dead (no retries)
        html = client.get("/workflow?id=wf-open").get_data(as_text=True)
    assert 'data-workflow-status="open"' in html
    members = section(html, "Members")
    assert re.findall(r'data-state="(\w+)"', members) == ["done", "dead"]
    assert 'href="/Steps/job?id=o-ok"' in members and 'href="/Steps/job?id=o-dies"' in members


def test_a_cancel_of_a_succeeded_workflow_leaves_it_shown_succeeded(client):
    succeeded_workflow("wf-ok")
    lowkiq.workflow("wf-ok").cancel()  # writes `cancelled` on a complete workflow
    html = client.get("/workflow?id=wf-ok").get_data(as_text=True)
    assert 'data-workflow-status="succeeded"' in html and "data-workflow-cancelled" not in html


def test_an_expired_workflow_that_still_holds_calls_shows_them(client, redis_client):
    pending_workflow("wf-run")
    redis_client.delete(store.prefix("wf-run") + "state")  # as its TTL would
    html = client.get("/workflow?id=wf-run").get_data(as_text=True)
    assert 'data-workflow-status="expired"' in html and "<code>after-1</code>" in html
    assert 'data-action="cancel-workflow"' not in html
    refused = post(client, "/workflow/cancel", {"id": "wf-run"})
    assert refused.status_code == 400 and "is expired: nothing to cancel" in refused.get_data(
        as_text=True
    )
    released = post(client, "/workflow/release-held", {"id": "wf-run"}).get_data(as_text=True)
    assert "1 held call of wf-run enqueued." in released
    assert "Nothing is left of workflow <code>wf-run</code>: it had expired." in released
    assert Report.metrics()["length"] == 2
    assert client.get("/workflow?id=wf-run").status_code == 404  # nothing left of it
