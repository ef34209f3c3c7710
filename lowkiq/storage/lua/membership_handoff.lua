-- membership_handoff: a process released shards; wake each one's assigned owner
-- (not every process), so it takes the shard now instead of when it next looks.
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  the releasing process's id; ARGV[2..] the released shards, `queue:shard`
-- Reads: M owners; writes M nudge:<owner> of each owner
-- Returns: how many processes were woken
local M = KEYS[1]
local woken = {}
local count = 0
for i = 2, #ARGV do
  local owner = redis.call('hget', M .. 'owners', ARGV[i])
  if owner and owner ~= ARGV[1] and not woken[owner] then
    woken[owner] = true
    count = count + 1
    nudge_process(M, owner)
  end
end
return count
