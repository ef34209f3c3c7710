-- restore: put a shard's processing area back into the queue (after a crash).
-- The processing copy's perform_in, retry_count and error win (SPEC §3 rule 3).
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  now
-- Writes: processing_hash(shard), queue keys
-- Returns: the number of jobs restored
local shard, now = ARGV[1], ARGV[2]
local processing = K.processing_hash(shard)
local entries = redis.call('hgetall', processing)
for i = 1, #entries, 2 do
  local perform_in, retry_count, error, blob = processing_unpack(entries[i + 1])
  queue_merge(entries[i], shard, blob, perform_in, retry_count, error, false, now)
end
redis.call('del', processing)
return #entries / 2
