"""The worker process's runtime: the dispatcher that owns every batch's lifecycle, the
executor threads that perform, and the states a shard goes through."""
