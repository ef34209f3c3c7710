-- leases: the current lease token of each given shard (for the dashboard).
-- KEYS[1]  queue prefix
-- ARGV     shards
-- Reads: lease(shard) of each
-- Returns: per shard, its token `epoch owner`, or false when nobody holds it
local tokens = {}
for i, shard in ipairs(ARGV) do
  tokens[i] = redis.call('get', K.lease(shard)) or false
end
return tokens
