-- membership_nudge: wake every other live process (e.g. leases were released,
-- so the shards' new owners take them now instead of at their next beat).
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  the nudging process's id
-- Writes: M nudge:<other> of each other live process
-- Returns: how many processes were nudged
local M = KEYS[1]
local count = 0
for _, other in ipairs(redis.call('zrange', M .. 'processes', 0, -1)) do
  if other ~= ARGV[1] then
    local nudge = M .. 'nudge:' .. other
    if redis.call('llen', nudge) == 0 then redis.call('rpush', nudge, '1') end
    count = count + 1
  end
end
return count
