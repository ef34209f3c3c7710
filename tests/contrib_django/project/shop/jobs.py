"""The test app's workers, found by the app's autodiscovery."""

from __future__ import annotations

import json
import os
from typing import Any

from django.db import connections

import lowkiq


class Recorded(lowkiq.Worker):
    """Appends each payload to the file ``RECORD_FILE`` names (one JSON line each)."""

    shards_count = 2

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        with open(os.environ["RECORD_FILE"], "a") as out:
            for job_id, payloads in payloads_by_id.items():
                for payload in payloads:
                    out.write(json.dumps({"id": job_id, "payload": payload}) + "\n")


class Querying(lowkiq.Worker):
    """Queries the database its payload names (``"default"`` or ``"pg"``) once per batch,
    and fails a batch whose query fails."""

    shards_count = 4
    max_retry_count = 0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for payloads in payloads_by_id.values():
            for payload in payloads:
                with connections[payload["db"]].cursor() as cursor:
                    cursor.execute("SELECT 1")
                    assert cursor.fetchone() == (1,)
        if os.environ.get("RECORD_FILE"):
            with open(os.environ["RECORD_FILE"], "a") as out:
                out.write("".join(f"{job_id}\n" for job_id in payloads_by_id))
