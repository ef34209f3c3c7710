"""Jobs that ended a process before: one at a time, with nothing else at risk.

A job whose ``perform`` ended its process (a segfault, an OOM kill, ``os._exit``)
is restored by its shard's next owner, which counts a death for every job it
finds in processing; after ``max_restores`` deaths a job goes to the morgue
(see ``restore_processing`` in ``lua/_common.lua``).  A job with a death counted
is a *suspect*: its shard's pop takes it alone (``Popped.suspect``), and the
process's dispatcher (:mod:`lowkiq.runtime.dispatcher`) runs one suspect at a
time, once every other batch in flight has ended and every finished batch is
acked (another suspect popped meanwhile goes back to its queue), and acks it at
once.  So when a suspect ends the process again, the jobs of other batches are
not in processing to be counted with it: a job that kills nothing is never
buried for another's deaths (at most one death is counted against it while it
is not yet a suspect; as a suspect it runs alone).
"""

from __future__ import annotations

#: Seconds a suspect waits, back in its queue, while another one runs.
RETRY = 0.5
