-- restore: put a shard's processing area back into the queue (the lease holder,
-- after a Redis error left the area's state unknown).
-- The processing copy's perform_in, retry_count and error win (SPEC §3 rule 3).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  now: '' for Redis's clock (a test may fix it)
-- Writes: processing_hash, queue keys (with payloads_zset(id) of hot ids)
-- Returns: the number of jobs restored; error FENCED when the lease is not held
if not lease_held(K, ARGV[1]) then return fenced() end
return (restore_processing(clock(ARGV[2]), nil, nil, ARGV[1]))
