-- workflow_settle: tell workflows what became of members (lowkiq.workflows.relay):
-- idempotent per member.  An ended member (done 'd', dead 'x', discarded 'c') keeps
-- its state; a failed one ('f', retrying) may still end.  Several workflows in one call
-- on one server (one, on a Redis Cluster: each is a slot of its own).
-- KEYS     each workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  per workflow, in the order of KEYS: the instance its members are of ('':
--            any), n, the n members' new states as one string (a letter each), then
--            the n members (each once)
-- Writes: W members, W state (its counts; status complete once every member ended)
-- Returns: per workflow, 1 when this call completed it, 0 if not (or complete already:
--   nothing changes then), -1 when no such workflow exists (expired or deleted), or
--   it is another instance (its id reused): its records are dropped
local count_of = {d = 'done', x = 'dead', c = 'discarded', f = 'failed'}
local FIELDS = {'instance', 'failed', unpack(WF_COUNTS)}

local function settle(prefix, instance_given, states, first, count)
  local state, members = prefix .. 'state', prefix .. 'members'
  -- instance, failed, then WF_COUNTS: status, total, done, dead, discarded, cancelled
  local known = redis.call('hmget', state, unpack(FIELDS))
  local instance = known[1]
  if not instance or (instance_given ~= '' and instance_given ~= instance) then return -1 end
  -- Complete: its counts are those its callbacks got (a member ending late, one a
  -- cancel did not wait for, changes nothing).
  if known[3] == 'complete' then return 0 end
  local counts = {failed = tonumber(known[2] or '0'), done = tonumber(known[5] or '0'),
                  dead = tonumber(known[6] or '0'), discarded = tonumber(known[7] or '0')}
  local fields, changed = {}, {}
  -- Every member's state read at once, every change written at once.
  for low = first, first + count - 1, 2000 do
    local high = math.min(low + 1999, first + count - 1)
    local currents = redis.call('hmget', members, unpack(ARGV, low, high))
    for j = 1, #currents do
      local current, at = currents[j], low - first + j
      local new = string.sub(states, at, at)
      if current ~= 'd' and current ~= 'x' and current ~= 'c' and current ~= new then
        fields[#fields + 1] = ARGV[low + j - 1]
        fields[#fields + 1] = new
        if current == 'f' then counts.failed = counts.failed - 1 end
        counts[count_of[new]] = counts[count_of[new]] + 1
        changed[count_of[new]] = true
        if current == 'f' then changed.failed = true end
      end
    end
  end
  if #fields > 0 then
    if #fields < 2 * BULK_PAIRS and tonumber(known[4] or '0') >= BULK_PAIRS
        and redis.call('exists', members) == 0 then
      -- A workflow of many members: its members hash a hash table from the first write.
      redis.call('hset', members, BULK_MARK, '')
      call_many('hset', members, fields)
      redis.call('hdel', members, BULK_MARK)
    else
      add_many('hset', members, fields)
    end
  end
  local written = {}
  for name in pairs(changed) do
    written[#written + 1] = name
    written[#written + 1] = counts[name]
  end
  return wf_complete(ARGV[1], prefix, {known[3], known[4], counts.done, counts.dead,
    counts.discarded, known[8]}, written)
end

local results = {}
local at = 2
for k = 1, #KEYS do
  local count = tonumber(ARGV[at + 1])
  results[k] = settle(KEYS[k], ARGV[at], ARGV[at + 2], at + 3, count)
  at = at + 3 + count
end
return results
