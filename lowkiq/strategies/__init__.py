"""Pluggable strategies, plain callables tested without Redis: schedulers pick which
idle shard the dispatcher pops next (:mod:`lowkiq.strategies.schedulers`), splitters
deal shards to threads and nodes (:mod:`lowkiq.strategies.splitters`)."""
