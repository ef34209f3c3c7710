-- membership_beat: a worker process says it is alive; O(1) but for the processes
-- whose beat lapsed, which it drops (at most 100 a call).
-- Expiry is judged on Redis's clock (TIME), never on the processes' clocks.
-- KEYS[1]  ownership prefix `lowkiq:{lowkiq}:` (M)
-- ARGV[1]  process id
-- ARGV[2]  TTL, milliseconds: the process ages out unless it beats again by then
-- ARGV[3]  weight: processing threads, 0 when quiet or stopping (takes no shards)
-- ARGV[4]  the queues it serves and their shards (JSON: {name: [first, stop]})
-- ARGV[5]  info (JSON: host, pid, threads, ...), or '' to keep the last one
-- Writes: M processes, M process:<id> (joined: Redis's time in ms when it joined);
--   M state: version (+1) when a process joined, lapsed or changed its weight or
--   queues (and then M nudge:<assigner>), assigner and assigner_until (when nobody
--   holds the role, given to the youngest serving process that beat within the last
--   half TTL, the least likely to leave next, and nudged; else extended by its holder)
-- Returns: {now_ms, membership version, assignment generation, the membership
--   version the assignment was computed from, command waiting for this process
--   or '', 1 when this process is the assigner else 0, config version (grows when
--   a queue is paused or resumed or a reshard changes shards)}
local M = KEYS[1]
local id, ttl, weight, queues, info = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
-- The process that joined last among those serving (weight above 0) that beat within
-- the last half TTL; this one when there is none.  O(processes), run only when the
-- assigner role is free.
local function youngest(now)
  local chosen, latest = id, -1
  for _, other in ipairs(redis.call('zrangebyscore', M .. 'processes', now + ttl / 2, '+inf')) do
    local fields = redis.call('hmget', M .. 'process:' .. other, 'joined', 'weight')
    local joined = tonumber(fields[1] or '0')
    if fields[2] ~= '0' and (joined > latest or (joined == latest and other < chosen)) then
      chosen, latest = other, joined
    end
  end
  return chosen
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local processes, state = M .. 'processes', M .. 'state'
local changed = false
for _, gone in ipairs(redis.call('zrangebyscore', processes, '-inf', now, 'limit', 0, 100)) do
  redis.call('zrem', processes, gone)
  redis.call('del', M .. 'process:' .. gone, M .. 'nudge:' .. gone)
  changed = true
end
local mine = M .. 'process:' .. id
local joined = redis.call('zadd', processes, now + ttl, id) == 1
-- The beat's time is its expiry less the TTL: nothing else is written per beat.
local shape = weight .. ' ' .. ttl .. ' ' .. queues
local before = redis.call('hmget', mine, 'shape', 'command')
if joined or before[1] ~= shape then
  changed = true
  redis.call('hset', mine, 'shape', shape, 'weight', weight, 'queues', queues, 'ttl', ttl)
end
if joined then redis.call('hset', mine, 'joined', now) end
if info ~= '' then redis.call('hset', mine, 'info', info) end
local command = before[2] or ''
if command ~= '' then redis.call('hdel', mine, 'command') end
local s = redis.call('hmget', state, 'version', 'generation', 'assigned', 'config', 'assigner',
  'assigner_until')
local assigner = s[5]
if not assigner or tonumber(s[6]) <= now then
  assigner = youngest(now)
  redis.call('hset', state, 'assigner', assigner, 'assigner_until', now + ttl)
  if assigner ~= id then nudge_process(M, assigner) end
elseif assigner == id then
  redis.call('hset', state, 'assigner_until', now + ttl)
end
local version = tonumber(s[1] or '0')
if changed then
  version = redis.call('hincrby', state, 'version', 1)
  if assigner ~= id then nudge_process(M, assigner) end
end
return {now, version, tonumber(s[2] or '0'), tonumber(s[3] or '-1'), command,
  assigner == id and 1 or 0, tonumber(s[4] or '0')}
