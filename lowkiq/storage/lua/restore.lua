-- restore: put a shard's processing area back into the queue (the lease holder,
-- after a Redis error left the area's state unknown).
-- The processing copy's perform_in, retry_count and error win (SPEC §3 rule 3).
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  lease token of the shard
-- ARGV[3]  now
-- Writes: processing_hash(shard), queue keys (with payloads_zset(id) of hot ids)
-- Returns: the number of jobs restored; error FENCED when the lease is not held
local shard, token, now = ARGV[1], ARGV[2], ARGV[3]
if not lease_held(shard, token) then return fenced(shard) end
return restore_processing(shard, now)
