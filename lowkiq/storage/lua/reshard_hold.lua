-- reshard_hold: hold a shard for a reshard (lowkiq/ownership/resharding.py).  `closed`:
-- a new shard takes pushes but no pop until its old shards are emptied.
-- `retired`: an old shard takes neither, for good (a late enqueue under the
-- old layout is refused and sent again to the new shards).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  'closed' or 'retired'
-- Writes: hold (never turns a retired shard back)
-- Returns: how many jobs the shard's processing area holds (a running batch)
if not retired() then redis.call('set', K.hold, ARGV[1]) end
return redis.call('hlen', K.processing_hash)
