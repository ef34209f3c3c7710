-- perform_now: set perform_in = now for up to `limit` jobs of a shard whose
-- perform_in is not already now (called until it returns 0).
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  now
-- ARGV[3]  limit
-- Writes: perform_in_zset(shard), wake_list(shard)
-- Returns: the number of jobs rescheduled (0: every job of the shard is due now)
local shard, now, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local key = K.perform_in_zset(shard)
local ids = redis.call('zrangebyscore', key, '-inf', '(' .. now, 'limit', 0, limit)
if #ids < limit then
  local later = redis.call('zrangebyscore', key, '(' .. now, '+inf', 'limit', 0, limit - #ids)
  for _, id in ipairs(later) do ids[#ids + 1] = id end
end
for _, id in ipairs(ids) do redis.call('zadd', key, now, id) end
if #ids > 0 then wake(shard) end
return #ids
