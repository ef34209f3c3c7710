-- membership_nudge: a queue was paused or resumed, or a reshard changed a queue's
-- shards: bump the config version (every process re-reads pauses and layouts when
-- its beat sees it grow) and wake every other live process once, so they follow now.
-- An operator's action, rare: the one O(processes) loop left.
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  the nudging process's id ('' for none)
-- Writes: M state (config +1), M nudge:<other> of each other live process
-- Returns: how many processes were nudged
local M = KEYS[1]
redis.call('hincrby', M .. 'state', 'config', 1)
local count = 0
for _, other in ipairs(redis.call('zrange', M .. 'processes', 0, -1)) do
  if other ~= ARGV[1] then
    nudge_process(M, other)
    count = count + 1
  end
end
return count
