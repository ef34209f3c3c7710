-- heads: the earliest perform_in of each given shard (what a thread's
-- scheduler looks at before choosing a shard), in one round trip.
-- KEYS[1]  queue prefix
-- ARGV     shards
-- Reads: perform_in_zset(shard) of each
-- Returns: per shard, its earliest perform_in as a string, or false when empty
local heads = {}
for i, shard in ipairs(ARGV) do
  heads[i] = redis.call('zrange', K.perform_in_zset(shard), 0, 0, 'withscores')[2] or false
end
return heads
