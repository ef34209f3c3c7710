-- workflow_settle: tell workflows what became of members (lowkiq.workflows.relay):
-- idempotent per member.  An ended member (done 'd', dead 'x', discarded 'c') keeps
-- its state; a failed one ('f', retrying) may still end.  Several workflows in one call
-- on one server (one, on a Redis Cluster: each is a slot of its own).
-- KEYS     each workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  per workflow, in the order of KEYS: the instance its members are of ('':
--            any), n, then n pairs: state, member
-- Writes: W members, W state (its counts; status complete once every member ended)
-- Returns: per workflow, 1 when this call completed it, 0 if not (or complete already:
--   nothing changes then), -1 when no such workflow exists (expired or deleted), or
--   it is another instance (its id reused): its records are dropped
local count_of = {d = 'done', x = 'dead', c = 'discarded', f = 'failed'}

local function settle(prefix, instance_given, first, count)
  local state, members = prefix .. 'state', prefix .. 'members'
  local known = redis.call('hmget', state, 'instance', 'status')
  local instance = known[1]
  if not instance or (instance_given ~= '' and instance_given ~= instance) then return -1 end
  -- Complete: its counts are those its callbacks got (a member ending late, one a
  -- cancel did not wait for, changes nothing).
  if known[2] == 'complete' then return 0 end
  if count > 0 then
    local names = {}
    for j = 1, count do names[j] = ARGV[first + 2 * j - 1] end
    -- Every member's state read at once, every change written at once.
    local currents = {}
    for low = 1, count, 2000 do
      local high = math.min(low + 1999, count)
      local read = redis.call('hmget', members, unpack(names, low, high))
      for j = 1, #read do currents[low + j - 1] = read[j] end
    end
    local changed, deltas = {}, {}
    for j, member in ipairs(names) do
      local current, new = changed[member] or currents[j] or nil, ARGV[first + 2 * j - 2]
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
  end
  return wf_complete(ARGV[1], prefix)
end

local results = {}
local at = 2
for k = 1, #KEYS do
  local count = tonumber(ARGV[at + 1])
  results[k] = settle(KEYS[k], ARGV[at], at + 2, count)
  at = at + 2 + 2 * count
end
return results
