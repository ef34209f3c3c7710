-- group_claims: per group of a worker, at most `cap` batches running at once
-- (Worker.group_concurrency) and at most `rate` jobs started per ms (a per-group rate
-- limit), across the fleet.  A batch claims, for each group of its jobs, a place (not
-- for the default group, '') and a token per job, before it runs: all or none.  A
-- place lives `ttl` ms unless renewed, so the places of a process that died come back
-- with its leases; a finished batch releases its places.  Every call also says which
-- groups are at their cap or out of tokens now: a pop skips them.
-- KEYS[1]  the worker's claims prefix `lowkiq:{name:groups}:`
-- ARGV[1]  'claim', 'release', 'renew' (places the claimant still holds, or may hold
--          again) or 'full' (only the answer)
-- ARGV[2]  the cap ('' for none), ARGV[3] the places' life (ms), ARGV[4] the claimant
--          (`shard epoch`), ARGV[5] the rate (tokens per ms; '' for none), ARGV[6] each
--          group's bucket size (burst)
-- ARGV[7]  the worker's batch size when groups have caps or rates of their own, set
--          at run time (lowkiq/storage/group_limits.py): they are read from the hash
--          `limits` (fields cap:<group>, rate:<group>) and win over ARGV[2], ARGV[5] and
--          ARGV[6] for their group; '' when none has
-- ARGV[8..]  pairs group, jobs of it in the batch
-- Keys: held:<group>, a zset claimant -> expiry (ms on Redis's clock), gone with its
--   last place; full, a set: the groups at the cap (a group leaves it when a call finds
--   it below); bucket:<group>, a hash `tokens`, `at` (ms), gone once full again;
--   dry, a zset group -> when its bucket holds a token again (ms); rate, a hash: `taken`
--   (tokens spent so far), `waited` (claims refused for a group out of tokens);
--   limits, a hash: the groups' settings made at run time (read only)
-- Returns: {1, or 0 when the claim was refused (and nothing written), the groups at
--   their cap, a flat list group, ms until its bucket holds a token again}
local op, cap, ttl, claimant = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local rate, burst = tonumber(ARGV[5]), tonumber(ARGV[6])
local batch = tonumber(ARGV[7])
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local full_key, dry_key = KEYS[1] .. 'full', KEYS[1] .. 'dry'

local function held(group) return KEYS[1] .. 'held:' .. group end

-- The cap, rate (tokens per ms) and bucket size of `group` (each nil or false: none):
-- its own, set at run time, or the worker's.
local own = {}
local function limits(group)
  if not batch or group == '' then return cap, rate, burst end
  local found = own[group]
  if not found then
    local set = redis.call('hmget', KEYS[1] .. 'limits', 'cap:' .. group, 'rate:' .. group)
    local c, r, b = cap, rate, burst
    if set[1] then c = tonumber(set[1]) end
    if set[2] then
      local jobs, per, size = string.match(set[2], '^(%S+) (%S+) (%S*)')
      r = tonumber(jobs) / tonumber(per) / 1000
      b = tonumber(size) or math.max(batch, math.ceil(r * 50))
    end
    found = {c or false, r or false, b or false}
    own[group] = found
  end
  return found[1], found[2], found[3]
end

-- The live places of `group` (the expired ones removed).
local function count(group)
  local key = held(group)
  redis.call('zremrangebyscore', key, '-inf', now)
  return redis.call('zcard', key)
end

-- Claim (or renew) a place of `group`, whose cap is `c`, for `ttl` ms more.
local function add(group, c)
  local key = held(group)
  redis.call('zadd', key, now + ttl, claimant)
  redis.call('pexpire', key, ttl)
  if c and redis.call('zcard', key) >= c then redis.call('sadd', full_key, group) end
end

-- The tokens of `group`'s bucket now (refilled since its last use; full when it has none).
local function tokens(group, r, b)
  local bucket = redis.call('hmget', KEYS[1] .. 'bucket:' .. group, 'tokens', 'at')
  if not bucket[1] then return b end
  return math.min(b, tonumber(bucket[1]) + (now - tonumber(bucket[2])) * r)
end

local function spend(group, left, r, b)
  local key = KEYS[1] .. 'bucket:' .. group
  redis.call('hset', key, 'tokens', left, 'at', now)
  redis.call('pexpire', key, math.ceil((b - left) / r) + 1)  -- gone when full
  if left < 1 then
    redis.call('zadd', dry_key, now + math.ceil((1 - left) / r), group)
  end
end

local granted = 1
if op == 'claim' then
  local left = {}
  local short, spent = false, 0  -- whether a group is out of tokens; the tokens asked
  for i = 8, #ARGV, 2 do
    local group, jobs = ARGV[i], tonumber(ARGV[i + 1])
    local c, r, b = limits(group)
    if c and group ~= '' and not redis.call('zscore', held(group), claimant)
        and count(group) >= c then
      granted = 0
    end
    if r then
      left[group] = tokens(group, r, b) - jobs
      spent = spent + jobs
      if left[group] < 0 then
        granted, short = 0, true
        redis.call('zadd', dry_key, now + math.ceil(-left[group] / r), group)
      end
    end
  end
  if granted == 1 then
    for i = 8, #ARGV, 2 do
      local group = ARGV[i]
      local c, r, b = limits(group)
      if c and group ~= '' then add(group, c) end
      if r then spend(group, left[group], r, b) end
    end
    if spent > 0 then redis.call('hincrby', KEYS[1] .. 'rate', 'taken', spent) end
  elseif short then
    redis.call('hincrby', KEYS[1] .. 'rate', 'waited', 1)
  end
elseif op == 'release' then
  for i = 8, #ARGV, 2 do redis.call('zrem', held(ARGV[i]), claimant) end
elseif op == 'renew' then
  for i = 8, #ARGV, 2 do
    local group = ARGV[i]
    local c = limits(group)
    if not c or redis.call('zscore', held(group), claimant) or count(group) < c then
      add(group, c)
    else
      granted = 0  -- lapsed, and the group's places taken meanwhile
    end
  end
end
local capped, dry = {}, {}
if cap or batch then
  for _, group in ipairs(redis.call('smembers', full_key)) do
    local c = limits(group)
    if c and count(group) >= c then
      capped[#capped + 1] = group
    else
      redis.call('srem', full_key, group)
    end
  end
end
redis.call('zremrangebyscore', dry_key, '-inf', now)
local rows = redis.call('zrange', dry_key, 0, -1, 'withscores')
for i = 1, #rows, 2 do
  dry[#dry + 1] = rows[i]
  dry[#dry + 1] = tonumber(rows[i + 1]) - now
end
return {granted, capped, dry}
