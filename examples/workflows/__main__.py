"""Start the workflow of one account: ``python -m examples.workflows [ACCOUNT] [ORDERS]``."""

from __future__ import annotations

import sys

import lowkiq
from examples.workflows.app import AccountReindexed, MailAccount, RebuildReport, ReindexOrder

account = int(sys.argv[1]) if len(sys.argv) > 1 else 42
orders = int(sys.argv[2]) if len(sys.argv) > 2 else 100
workflow_id = f"reindex-account-{account}"

with lowkiq.Workflow(
    workflow_id,
    on_complete=AccountReindexed,
    on_success=MailAccount,
    payload={"account": account},
) as workflow:
    # Every payload enqueued inside the block is a member, whatever the worker.
    ReindexOrder.perform_async(
        [{"id": f"{account}-{n}", "payload": {"account": account}} for n in range(orders)]
    )

# Stored now, performed once the workflow succeeded.
RebuildReport.perform_async([{"id": account}], after=workflow_id)

print(f"{workflow_id}: {workflow.status().total} members; the report waits for them")
