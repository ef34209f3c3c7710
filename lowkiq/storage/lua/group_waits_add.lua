-- group_waits_add: add a process's queue waits of a few seconds, per group, to the
-- worker's wait histogram of each group (Prometheus lowkiq_group_wait_seconds).  At most
-- `limit` groups keep one of their own: those with the most jobs (their counts halved
-- every DECAY seconds, so a group that went quiet gives its place up); the others' waits
-- are added to the histogram of OTHER.  A group whose jobs of this call outnumber the
-- smallest count kept takes its place, whose histogram is added to OTHER's.
-- KEYS[1]  the worker's metrics prefix `lowkiq:{name:metrics}:`
-- ARGV[1]  limit (groups kept apart), ARGV[2] slots (bucket counts a histogram holds),
--          ARGV[3] now (unix seconds, for the halving)
-- ARGV[4..]  per group: its name ('' the default group; OTHER the waits of groups the
--          process did not keep apart), jobs, seconds waited (summed), then `slots`
--          bucket counts
-- Keys: group_waits, a hash: `<group>\0<slot>` (counts, slots 0.. and `sum`);
--   group_jobs, a zset: group -> its jobs (halved every DECAY s); group_jobs_at, when they
--   were last halved
-- Returns: how many groups keep a histogram of their own
local DECAY = 3600
local OTHER = '\0other'
local limit, slots, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local waits, jobs_key, at_key = KEYS[1] .. 'group_waits', KEYS[1] .. 'group_jobs',
  KEYS[1] .. 'group_jobs_at'

local halved_at = tonumber(redis.call('get', at_key) or '')
if not halved_at then
  redis.call('set', at_key, ARGV[3])
elseif now - halved_at >= DECAY then
  local rows = redis.call('zrange', jobs_key, 0, -1, 'withscores')
  for i = 1, #rows, 2 do
    rows[i], rows[i + 1] = string.format('%.17g', rows[i + 1] / 2), rows[i]
  end
  if #rows > 0 then redis.call('zadd', jobs_key, unpack(rows)) end
  redis.call('set', at_key, ARGV[3])
end

-- Add a histogram (ARGV from `first`: jobs, sum, slots) to `group`'s.
local function add(group, first)
  redis.call('hincrbyfloat', waits, group .. '\0sum', ARGV[first + 1])
  for slot = 0, slots - 1 do
    local count = tonumber(ARGV[first + 2 + slot])
    if count > 0 then redis.call('hincrby', waits, group .. '\0' .. slot, count) end
  end
end

-- `group` gives its histogram to OTHER's and its place up.
local function fold(group)
  local fields = {group .. '\0sum'}
  for slot = 0, slots - 1 do fields[#fields + 1] = group .. '\0' .. slot end
  local values = redis.call('hmget', waits, unpack(fields))
  if values[1] then redis.call('hincrbyfloat', waits, OTHER .. '\0sum', values[1]) end
  for slot = 0, slots - 1 do
    local count = values[slot + 2]
    if count then redis.call('hincrby', waits, OTHER .. '\0' .. slot, count) end
  end
  redis.call('hdel', waits, unpack(fields))
  redis.call('zrem', jobs_key, group)
end

-- A lowered limit: the smallest give their places up.
while redis.call('zcard', jobs_key) > limit do
  fold(redis.call('zrange', jobs_key, 0, 0)[1])
end

local stride = 3 + slots  -- name, jobs, sum, counts
for first = 5, #ARGV, stride do
  local group, jobs = ARGV[first - 1], tonumber(ARGV[first])
  local kept = group ~= OTHER and limit > 0
  if kept and not redis.call('zscore', jobs_key, group)
      and redis.call('zcard', jobs_key) >= limit then
    local smallest = redis.call('zrange', jobs_key, 0, 0, 'withscores')
    if jobs > tonumber(smallest[2]) then fold(smallest[1]) else kept = false end
  end
  if kept then
    redis.call('zincrby', jobs_key, jobs, group)
    add(group, first)
  else
    add(OTHER, first)
  end
end
return redis.call('zcard', jobs_key)
