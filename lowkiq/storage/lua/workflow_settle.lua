-- workflow_settle: tell workflows what became of members (lowkiq.workflows.relay):
-- idempotent per member.  A member that ended (done 'd', dead 'x', discarded 'c') is in
-- W ended and keeps its state; a failed one ('f', retrying) may still end.  Several
-- workflows in one call on one server (one, on a Redis Cluster: each is a slot of its
-- own).
-- KEYS     each workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  per workflow, in the order of KEYS: the instance its members are of ('':
--            any), n, the n members' new states as one string (a letter each), then
--            the n members (each once)
-- Writes: W ended, W states, W state (its counts; status complete once every member
--   ended)
-- Returns: per workflow, 1 when this call completed it, 0 if not (or complete already:
--   nothing changes then), -1 when no such workflow exists (expired or deleted), or
--   it is another instance (its id reused): its records are dropped
local count_of = {d = 'done', x = 'dead', c = 'discarded', f = 'failed'}
local FIELDS = {'instance', 'failed', unpack(WF_COUNTS)}

-- Any states: each member's read (ended? its state in W states), then every change
-- written at once; `counts` changed in place.
local function each(prefix, states, first, count, counts)
  local ended, kept = prefix .. 'ended', prefix .. 'states'
  local newly, marks, unmarks = {}, {}, {}
  for low = first, first + count - 1, ARGS_CHUNK do
    local high = math.min(low + ARGS_CHUNK - 1, first + count - 1)
    local is_ended = redis.call('smismember', ended, unpack(ARGV, low, high))
    local currents = redis.call('hmget', kept, unpack(ARGV, low, high))
    for j = 1, high - low + 1 do
      local member, at = ARGV[low + j - 1], low - first + j
      local new, current = string.sub(states, at, at), currents[j]
      if is_ended[j] == 0 and current ~= new then
        if current == 'f' then counts.failed = counts.failed - 1 end
        counts[count_of[new]] = counts[count_of[new]] + 1
        if new ~= 'f' then newly[#newly + 1] = member end
        if new == 'd' then
          if current then unmarks[#unmarks + 1] = member end
        else
          marks[#marks + 1] = member
          marks[#marks + 1] = new
        end
      end
    end
  end
  if #newly > 0 then call_many('sadd', ended, newly) end
  if #marks > 0 then call_many('hset', kept, marks) end
  if #unmarks > 0 then call_many('hdel', kept, unmarks) end
end

local function settle(prefix, instance_given, states, first, count)
  -- instance, failed, then WF_COUNTS: status, total, done, dead, discarded, cancelled
  local known = redis.call('hmget', prefix .. 'state', unpack(FIELDS))
  local instance = known[1]
  if not instance or (instance_given ~= '' and instance_given ~= instance) then return -1 end
  -- Complete: its counts are those its callbacks got (a member ending late, one a
  -- cancel did not wait for, changes nothing).
  if known[3] == 'complete' then return 0 end
  local counts = {failed = tonumber(known[2] or '0'), done = tonumber(known[5] or '0'),
                  dead = tonumber(known[6] or '0'), discarded = tonumber(known[7] or '0')}
  local before = {}
  for name, value in pairs(counts) do before[name] = value end
  if count > 0 then
    if counts.failed == 0 and not string.find(states, '[^d]') then
      -- All done, none of the workflow failing: each member new to W ended is done
      -- (one SADD a chunk, nothing read).
      counts.done = counts.done + call_many('sadd', prefix .. 'ended', ARGV, first, first + count - 1)
    else
      each(prefix, states, first, count, counts)
    end
  end
  local written = {}
  for name, value in pairs(counts) do
    if value ~= before[name] then
      written[#written + 1] = name
      written[#written + 1] = value
    end
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
