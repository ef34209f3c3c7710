"""The run-time configuration's version: a change made at run time (a pause, a rate
limit, a group's setting, a schedule) bumps it and wakes every live process, whose
coordinator reads the configuration again at once (``lua/membership_nudge.lua``;
:mod:`lowkiq.ownership.watchers`)."""

from __future__ import annotations

from lowkiq.clients.connection import Client
from lowkiq.storage.keys import OwnershipKeys
from lowkiq.storage.scripts import Scripts

_KEYS = OwnershipKeys()


def nudge_all(client: Client) -> None:
    """Bump the version and wake every live process's coordinator, so it reads the
    run-time configuration now."""
    Scripts.for_client(client).membership_nudge(keys=[_KEYS.prefix], args=[""])
