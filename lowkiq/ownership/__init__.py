"""Who serves which shard: process membership, shard assignment and leases.

* :mod:`~lowkiq.ownership.leases`: a lease with a TTL and an epoch per shard;
  pop, ack, fail and restore take its token, so a stale owner changes nothing.
* :mod:`~lowkiq.ownership.membership`: processes register and heartbeat on
  Redis's clock; a lapsed process ages out.
* :mod:`~lowkiq.ownership.assignment`: a pure function from live processes,
  shards and their previous owners to owners, balanced by threads per queue
  and in total, moving few shards when a process joins or leaves.
* :mod:`~lowkiq.ownership.coordinator`: one process's heartbeat thread, which
  ties the three together and tells the process's dispatcher what to serve.
"""
