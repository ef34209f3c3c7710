"""The worker process's runtime: the server (threads, lifecycle, signals), the
supervisor of ``--processes N``, the dispatcher that owns every batch's lifecycle,
the executor threads that perform, each shard's handler and the states a shard goes
through."""
