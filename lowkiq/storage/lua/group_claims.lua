-- group_claims: Worker.group_concurrency, at most `cap` batches running jobs of one
-- group across the fleet.  A batch claims each group of its jobs (not the default
-- group) before it runs, all or none; a claim lives `ttl` ms unless renewed, so the
-- claims of a process that died come back with its leases; a finished batch releases
-- its claims.  Every call also says which groups are at the cap now: a pop skips them.
-- KEYS[1]  the worker's claims prefix `lowkiq:{name:groups}:`
-- ARGV[1]  'claim', 'release', 'renew' (claims the claimant still holds, or may hold
--          again) or 'full' (only the answer)
-- ARGV[2]  the cap, ARGV[3] the claims' life (ms), ARGV[4] the claimant (`shard epoch`)
-- ARGV[5..]  groups
-- Keys: held:<group>, a zset claimant -> expiry (ms on Redis's clock), gone with its
--   last claim; full, a set: the groups at the cap (a group leaves it when a call finds
--   it below)
-- Returns: {1, or 0 when a claim was refused (and nothing written), the groups at the cap}
local op, cap, ttl, claimant = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local full_key = KEYS[1] .. 'full'

local function held(group) return KEYS[1] .. 'held:' .. group end

-- The live claims of `group` (the expired ones removed).
local function count(group)
  local key = held(group)
  redis.call('zremrangebyscore', key, '-inf', now)
  return redis.call('zcard', key)
end

-- Claim (or renew) a place of `group` for `ttl` ms more.
local function add(group)
  local key = held(group)
  redis.call('zadd', key, now + ttl, claimant)
  redis.call('pexpire', key, ttl)
  if redis.call('zcard', key) >= cap then redis.call('sadd', full_key, group) end
end

local granted = 1
if op == 'claim' then
  for i = 5, #ARGV do
    if not redis.call('zscore', held(ARGV[i]), claimant) and count(ARGV[i]) >= cap then
      granted = 0
    end
  end
  if granted == 1 then
    for i = 5, #ARGV do add(ARGV[i]) end
  end
elseif op == 'release' then
  for i = 5, #ARGV do redis.call('zrem', held(ARGV[i]), claimant) end
elseif op == 'renew' then
  for i = 5, #ARGV do
    local group = ARGV[i]
    if redis.call('zscore', held(group), claimant) or count(group) < cap then
      add(group)
    else
      granted = 0  -- lapsed, and the group's places taken meanwhile
    end
  end
end
local full = {}
for _, group in ipairs(redis.call('smembers', full_key)) do
  if count(group) >= cap then
    full[#full + 1] = group
  else
    redis.call('srem', full_key, group)
  end
end
return {granted, full}
