-- workflow_settle: tell a workflow what became of members (lowkiq.workflows.relay):
-- idempotent per member.  An ended member (done 'd', dead 'x', discarded 'c') keeps
-- its state; a failed one ('f', retrying) may still end.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  the workflow's instance the members are of ('': any)
-- ARGV[3..]  pairs: state, member
-- Writes: W members, W state (its counts; status complete once every member ended)
-- Returns: 1 when this call completed the workflow, 0 if not, -1 when no such
--   workflow exists (expired or deleted), or it is another instance (its id reused):
--   the records are dropped
local state, members = P .. 'state', P .. 'members'
local instance = redis.call('hget', state, 'instance')
if not instance or (ARGV[2] ~= '' and ARGV[2] ~= instance) then return -1 end
local count_of = {d = 'done', x = 'dead', c = 'discarded', f = 'failed'}
for i = 3, #ARGV, 2 do
  local new, member = ARGV[i], ARGV[i + 1]
  local current = redis.call('hget', members, member)
  if current ~= 'd' and current ~= 'x' and current ~= 'c' and current ~= new then
    redis.call('hset', members, member, new)
    if current == 'f' then redis.call('hincrby', state, 'failed', -1) end
    redis.call('hincrby', state, count_of[new], 1)
  end
end
return wf_complete(ARGV[1])
