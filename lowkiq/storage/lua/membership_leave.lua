-- membership_leave: a stopping process deregisters and nudges the others, so
-- they take its shards now rather than when its beat would have lapsed.
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  process id
-- Writes: M processes, M process:<id>, M nudge:<id>, M nudge:<other> of each other
-- Returns: how many other processes were nudged
local M = KEYS[1]
local id = ARGV[1]
redis.call('zrem', M .. 'processes', id)
redis.call('del', M .. 'process:' .. id, M .. 'nudge:' .. id)
local others = redis.call('zrange', M .. 'processes', 0, -1)
for _, other in ipairs(others) do
  local nudge = M .. 'nudge:' .. other
  if redis.call('llen', nudge) == 0 then redis.call('rpush', nudge, '1') end
end
return #others
