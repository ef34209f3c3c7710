"""Rate limits, caps and groups: ``lowkiq.RateLimit`` and the limits set at run time
(:mod:`lowkiq.limits.rate_limit`), a worker process applying them to its shards
(:mod:`lowkiq.limits.throttling`), and ``Worker.group_concurrency`` with per-group
rates in one process (:mod:`lowkiq.limits.group_caps`)."""
