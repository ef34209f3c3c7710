-- layout_begin: start a reshard: new jobs go to `count` new shards numbered
-- from base + old count, while the old shards are emptied into them.  The
-- caller closed the new shards first (reshard_hold).
-- KEYS[1]  the queue's layout hash
-- KEYS[2]  the queue's retired set
-- ARGV[1]  the old base (as the caller read it), ARGV[2] the old count,
-- ARGV[3]  the new count, ARGV[4] now
-- Writes: the layout hash, the retired set (emptied)
-- Returns: the new base; an error when a reshard runs or the layout changed
local L = KEYS[1]
if redis.call('hexists', L, 'from_base') == 1 then
  return redis.error_reply('RESHARDING a reshard of the queue is running')
end
if (redis.call('hget', L, 'base') or '0') ~= ARGV[1] then
  return redis.error_reply('CHANGED the queue was resharded meanwhile')
end
local base = tonumber(ARGV[1]) + tonumber(ARGV[2])
redis.call('hset', L, 'from_base', ARGV[1], 'from_count', ARGV[2], 'base', base,
  'count', ARGV[3], 'started_at', ARGV[4], 'moved', 0)
redis.call('del', KEYS[2])
return base
