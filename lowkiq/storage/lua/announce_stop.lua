-- announce_stop: the shard's owner is stopping (TERM) with a batch running: if it
-- is killed before it settles the batch, the next owner restores the batch without
-- counting it toward max_restores (a deploy is not a death the job caused).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- Writes: stopping_flag (read and deleted by the next lease_acquire)
-- Returns: 1; error FENCED when the lease is not held
if not lease_held(K, ARGV[1]) then return fenced() end
redis.call('set', K.stopping_flag, ARGV[1])
return 1
