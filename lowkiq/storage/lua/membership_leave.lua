-- membership_leave: a stopping process deregisters (or a supervisor deregisters a
-- child it saw die), so its shards are reassigned now rather than when its beat
-- would have lapsed.  Wakes the assigner only; when the leaving process was the
-- assigner, the role is freed and the oldest other process is woken to take it.
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  process id
-- Writes: M processes, M process:<id>, M nudge:<id>, M state (version +1; assigner),
--   M nudge:<assigner or oldest process>
-- Returns: 1 when the process was a member, else 0
local M = KEYS[1]
local id = ARGV[1]
local was = redis.call('zrem', M .. 'processes', id)
redis.call('del', M .. 'process:' .. id, M .. 'nudge:' .. id)
if was == 0 then return 0 end
redis.call('hincrby', M .. 'state', 'version', 1)
local assigner = redis.call('hget', M .. 'state', 'assigner')
if assigner == id then
  redis.call('hdel', M .. 'state', 'assigner', 'assigner_until')
  assigner = redis.call('zrange', M .. 'processes', 0, 0)[1]
end
if assigner then
  nudge_process(M, assigner)
end
return 1
