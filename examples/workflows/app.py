"""Re-index every order of an account, then mail the account: a workflow.

Run a worker on it with ``lowkiq worker -r examples/workflows/app.py`` and start a
workflow with ``python -m examples.workflows`` (docs/guides/workflows.md).
"""

from __future__ import annotations

from typing import Any

import lowkiq


def reindex(order_id: str, order: dict[str, Any]) -> None:
    """Stands in for the real work: one order in the search index."""


class ReindexOrder(lowkiq.Worker):
    """The members: one job per order."""

    shards_count = 8
    batch_size = 10

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for order_id, payloads in payloads_by_id.items():
            reindex(order_id, payloads[-1])


class AccountReindexed(lowkiq.Worker):
    """``on_complete``: once, when every order ended, however it ended."""

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for workflow_id, callbacks in payloads_by_id.items():
            for callback in callbacks:
                status = callback["status"]
                print(
                    f"{workflow_id} complete: {status['done']} done, {status['dead']} dead, "
                    f"{status['discarded']} discarded",
                    flush=True,
                )


class MailAccount(lowkiq.Worker):
    """``on_success``: once, when every order ended and none is dead."""

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for callbacks in payloads_by_id.values():
            account = callbacks[-1]["payload"]["account"]
            print(f"mail to account {account}: your orders are searchable", flush=True)


class RebuildReport(lowkiq.Worker):
    """Enqueued ``after=`` the workflow: held until it succeeds."""

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for account in payloads_by_id:
            print(f"report of account {account} rebuilt", flush=True)


lowkiq.settings.workers = [ReindexOrder, AccountReindexed, MailAccount, RebuildReport]
