-- perform_now: set perform_in = now for up to `limit` not-yet-due jobs of a shard.
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  now
-- ARGV[3]  limit
-- Writes: perform_in_zset(shard), wake_list(shard)
-- Returns: the number of jobs rescheduled (0: the shard has none left)
local shard, now = ARGV[1], ARGV[2]
local key = K.perform_in_zset(shard)
local ids = redis.call('zrangebyscore', key, '(' .. now, '+inf', 'limit', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do redis.call('zadd', key, now, id) end
if #ids > 0 then wake(shard) end
return #ids
