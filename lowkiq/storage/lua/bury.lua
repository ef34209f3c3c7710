-- bury: move jobs of the shard's batch, whole, to the morgue with their own
-- error, without retries (e.g. a payload the app cannot decode).
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  lease token of the shard
-- ARGV[3]  now
-- ARGV[4+2i..5+2i]  id, error (already serialized)
-- Writes: processing_hash(shard), morgue keys, failed_counter (+= jobs buried)
-- Returns: the number of jobs buried; error FENCED when the lease is not held
local shard, token, now = ARGV[1], ARGV[2], ARGV[3]
if not lease_held(shard, token) then return fenced(shard) end
local processing = K.processing_hash(shard)
local buried = 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local value = redis.call('hget', processing, id)
  if value then
    local _, _, _, blob = processing_unpack(value)
    morgue_merge(id, blob, ARGV[i + 1], now)
    redis.call('hdel', processing, id)
    buried = buried + 1
  end
end
if buried > 0 then redis.call('incrby', K.failed_counter, buried) end
return buried
