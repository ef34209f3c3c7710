-- workflow_settle: tell workflows what became of members (lowkiq.workflows.relay):
-- idempotent per member.  A member that ended (done 'd', dead 'x', discarded 'c') is in
-- W ended:<instance> and keeps its state; a failed one ('f', retrying) may still end.
-- The done count is the members ended but dead or discarded, so the caller may add
-- done members to W ended:<instance> itself first (SADD: no script reads them, sent
-- straight to the set); a crash between its SADD and this call changes nothing that a
-- call again does not mend.  Several workflows in one call on one server (one, on a
-- Redis Cluster: each is a slot of its own).
-- KEYS     each workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  ms a complete workflow's keys are kept (settings.workflow_ttl)
-- ARGV[3..]  per workflow, in the order of KEYS: the instance its members are of ('':
--            any), '1' when the caller added done members to W ended:<instance> (else
--            ''), n, the n members' new states as one string (a letter each), then the
--            n members (each once)
-- Writes: W ended:<instance>, W states, W state (its counts; status complete once every
--   member ended, and then its keys' expiry)
-- Returns: per workflow, 1 when this call completed it, 0 if not (or complete already:
--   nothing changes then), -1 when no such workflow exists (expired or deleted), or
--   it is another instance (its id reused): its records are dropped (and the members
--   the caller added, deleted); -2 when the caller added done members and some of the
--   workflow's are failed (one of them may be among those): nothing changed, call again
--   with the done members given
local count_of = {x = 'dead', c = 'discarded', f = 'failed'}
local FIELDS = {'instance', 'failed', unpack(WF_COUNTS)}

-- Each member's read (ended? its state in W states), then every change written at
-- once; `counts` (failed, dead, discarded) changed in place.
local function each(ended, kept, states, first, count, counts)
  local newly, marks, unmarks = {}, {}, {}
  for low = first, first + count - 1, ARGS_CHUNK do
    local high = math.min(low + ARGS_CHUNK - 1, first + count - 1)
    local is_ended = redis.call('smismember', ended, unpack(ARGV, low, high))
    local currents = redis.call('hmget', kept, unpack(ARGV, low, high))
    for j = 1, high - low + 1 do
      local member, at = ARGV[low + j - 1], low - first + j
      local new, current = string.sub(states, at, at), currents[j]
      if is_ended[j] == 1 then
        -- Ended, it keeps its state; but a done member the caller added while it was
        -- failed is failed no more.
        if new == 'd' and current == 'f' then
          counts.failed = counts.failed - 1
          unmarks[#unmarks + 1] = member
        end
      elseif current ~= new then
        if current == 'f' then counts.failed = counts.failed - 1 end
        if new ~= 'd' then counts[count_of[new]] = counts[count_of[new]] + 1 end
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

local function settle(prefix, given, sent, states, first, count)
  -- instance, failed, then WF_COUNTS: status, total, done, dead, discarded, cancelled
  local known = redis.call('hmget', prefix .. 'state', unpack(FIELDS))
  local instance = known[1]
  if not instance or (given ~= '' and given ~= instance) then
    if sent ~= '' then redis.call('del', prefix .. 'ended:' .. given) end
    return -1
  end
  local ended = prefix .. 'ended:' .. instance
  -- Complete: its counts are those its callbacks got (a member ending late, one a
  -- cancel did not wait for, changes nothing; a set the caller made now expires too).
  if known[3] == 'complete' then
    if sent ~= '' and redis.call('pttl', ended) == -1 then redis.call('pexpire', ended, ARGV[2]) end
    return 0
  end
  local counts = {failed = tonumber(known[2] or '0'), done = tonumber(known[5] or '0'),
                  dead = tonumber(known[6] or '0'), discarded = tonumber(known[7] or '0')}
  if sent ~= '' and counts.failed > 0 then return -2 end
  local before = {}
  for name, value in pairs(counts) do before[name] = value end
  local kept = prefix .. 'states'
  if count > 0 then each(ended, kept, states, first, count, counts) end
  counts.done = redis.call('scard', ended) - counts.dead - counts.discarded
  if counts.failed > 0 and known[3] == 'closed'
    and counts.done + counts.dead + counts.discarded >= tonumber(known[4]) then
    counts.failed = wf_unfail(ended, kept, counts.failed)
  end
  local written = {}
  for name, value in pairs(counts) do
    if value ~= before[name] then
      written[#written + 1] = name
      written[#written + 1] = value
    end
  end
  return wf_complete(ARGV[1], ARGV[2], prefix, instance, {known[3], known[4], counts.done,
    counts.dead, counts.discarded, known[8]}, written)
end

local results = {}
local at = 3
for k = 1, #KEYS do
  local count = tonumber(ARGV[at + 2])
  results[k] = settle(KEYS[k], ARGV[at], ARGV[at + 1], ARGV[at + 3], at + 4, count)
  at = at + 4 + count
end
return results
