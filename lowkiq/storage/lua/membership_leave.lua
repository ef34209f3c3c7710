-- membership_leave: a stopping process deregisters (or a supervisor deregisters a
-- child it saw die), so its shards are reassigned now rather than when its beat
-- would have lapsed.  Wakes the assigner only; when the leaving process was the
-- assigner, the role is freed and the other process whose beat is the oldest is woken
-- (its beat gives the role to the youngest process).
-- A process that left with weight 0 (it stopped on TERM: its last beat said so)
-- and no shards in an up-to-date assignment changes nothing: the assignment stays
-- up to date for the new version (weight-0 members take no shards) and nobody is
-- woken.
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  process id
-- Writes: M processes, M process:<id>, M nudge:<id>, M state (version +1; assigner;
--   assigned), M nudge:<assigner or oldest process>
-- Returns: 1 when the process was a member, else 0
local M = KEYS[1]
local id = ARGV[1]
local state = M .. 'state'
local weight = redis.call('hget', M .. 'process:' .. id, 'weight')
local was = redis.call('zrem', M .. 'processes', id)
redis.call('del', M .. 'process:' .. id, M .. 'nudge:' .. id)
if was == 0 then return 0 end
local version = redis.call('hincrby', state, 'version', 1)
local assigner = redis.call('hget', state, 'assigner')
if assigner == id then
  redis.call('hdel', state, 'assigner', 'assigner_until')
  assigner = redis.call('zrange', M .. 'processes', 0, 0)[1]
end
if weight == '0' and tonumber(redis.call('hget', state, 'assigned') or '-1') == version - 1
    and redis.call('hexists', M .. 'assignment', id) == 0 then
  redis.call('hset', state, 'assigned', version)
elseif assigner then
  nudge_process(M, assigner)
end
return 1
