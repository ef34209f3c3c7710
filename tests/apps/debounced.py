"""A worker app for the debounce test: the recorder's worker (see
:mod:`tests.apps.recorder`) with ``merge_perform_in = "latest"``, so that each enqueue
of a queued id with a ``delay`` moves its run to that long after the last one."""

from __future__ import annotations

import lowkiq
from tests.apps.recorder import Recorder


class Debounced(Recorder):
    """Records its performs as :class:`Recorder` does; a new enqueue moves perform_in."""

    merge_perform_in = "latest"


lowkiq.settings.workers = [Debounced]
