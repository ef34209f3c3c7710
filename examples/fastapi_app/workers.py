"""The example's worker: a welcome message per new account, sent once however many
sign-up events of that account arrive before it runs.

Run it with ``lowkiq worker -r examples.fastapi_app.workers`` (on ``REDIS_URL``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import lowkiq

#: The Redis hash where the worker notes each account it welcomed (account -> events).
WELCOMED = "fastapi-example:welcomed"


class Welcome(lowkiq.Worker):
    """One job per account id; its payloads are the account's sign-up events."""

    shards_count = 4
    batch_size = 20
    max_retry_count = 5

    @classmethod
    async def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        """Send each account its welcome (here: a pause standing for the mail server's
        answer), then note it.  A coroutine: it runs on this processing thread's own
        event loop, not on the web app's."""
        await asyncio.gather(*(asyncio.sleep(0.01) for _ in payloads_by_id))
        client = lowkiq.settings.client()
        for account, events in payloads_by_id.items():
            client.hincrby(WELCOMED, account, len(events))


lowkiq.settings.workers = [Welcome]
