-- workflow_settle: tell a workflow what became of members (lowkiq.workflows.relay):
-- idempotent per member.  An ended member (done 'd', dead 'x', discarded 'c') keeps
-- its state; a failed one ('f', retrying) may still end.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  the workflow's instance the members are of ('': any)
-- ARGV[3..]  pairs: state, member
-- Writes: W members, W state (its counts; status complete once every member ended)
-- Returns: 1 when this call completed the workflow, 0 if not (or complete already:
--   nothing changes then), -1 when no such
--   workflow exists (expired or deleted), or it is another instance (its id reused):
--   the records are dropped
local state, members = P .. 'state', P .. 'members'
local known = redis.call('hmget', state, 'instance', 'status')
local instance = known[1]
if not instance or (ARGV[2] ~= '' and ARGV[2] ~= instance) then return -1 end
-- Complete: its counts are those its callbacks got (a member ending late, one a cancel
-- did not wait for, changes nothing).
if known[2] == 'complete' then return 0 end
local count_of = {d = 'done', x = 'dead', c = 'discarded', f = 'failed'}
local names = {}
for i = 4, #ARGV, 2 do names[#names + 1] = ARGV[i] end
-- Every member's state read at once, every change written at once.
local currents = {}
for first = 1, #names, 2000 do
  local last = math.min(first + 1999, #names)
  local read = redis.call('hmget', members, unpack(names, first, last))
  for j = 1, #read do currents[first + j - 1] = read[j] end
end
local changed, deltas = {}, {}
for j, member in ipairs(names) do
  local current, new = changed[member] or currents[j] or nil, ARGV[2 * j + 1]
  if current ~= 'd' and current ~= 'x' and current ~= 'c' and current ~= new then
    changed[member] = new
    if current == 'f' then deltas.failed = (deltas.failed or 0) - 1 end
    deltas[count_of[new]] = (deltas[count_of[new]] or 0) + 1
  end
end
local fields = {}
for member, new in pairs(changed) do
  fields[#fields + 1] = member
  fields[#fields + 1] = new
end
add_many('hset', members, fields)
for name, delta in pairs(deltas) do
  if delta ~= 0 then redis.call('hincrby', state, name, delta) end
end
return wf_complete(ARGV[1])
