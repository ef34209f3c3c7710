"""Job storage on Redis: key names, Lua scripts, writes, reads, bulk actions, metrics."""
