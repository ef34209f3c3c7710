-- perform_now: set perform_in = now for up to `limit` jobs of a shard that are
-- not due yet (called until it returns 0); due jobs keep their order.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  limit
-- Writes: perform_in_zset, the group keys, wake_list
-- Returns: the number of jobs rescheduled (0: every job of the shard is due)
if retired() then return 0 end  -- its jobs moved to the new shards
local now, limit = clock(ARGV[1]), tonumber(ARGV[2])
local key = K.perform_in_zset
local ids = redis.call('zrangebyscore', key, '(' .. now, '+inf', 'limit', 0, limit)
for _, id in ipairs(ids) do reschedule_queued(id, now, now) end
if #ids > 0 then wake() end
return #ids
