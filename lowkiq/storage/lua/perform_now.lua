-- perform_now: set perform_in = now for up to `limit` jobs of a shard whose
-- perform_in is not already now (called until it returns 0).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now
-- ARGV[2]  limit
-- Writes: perform_in_zset, wake_list
-- Returns: the number of jobs rescheduled (0: every job of the shard is due now)
if retired() then return 0 end  -- its jobs moved to the new shards
local now, limit = ARGV[1], tonumber(ARGV[2])
local key = K.perform_in_zset
local ids = redis.call('zrangebyscore', key, '-inf', '(' .. now, 'limit', 0, limit)
if #ids < limit then
  local later = redis.call('zrangebyscore', key, '(' .. now, '+inf', 'limit', 0, limit - #ids)
  for _, id in ipairs(later) do ids[#ids + 1] = id end
end
for _, id in ipairs(ids) do redis.call('zadd', key, now, id) end
if #ids > 0 then wake() end
return #ids
