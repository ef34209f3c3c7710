-- membership_beat: a worker process says it is alive; live processes are listed.
-- Expiry is judged on Redis's clock (TIME), never on the processes' clocks.
-- KEYS[1]  ownership prefix `lowkiq:{lowkiq}:` (M)
-- ARGV[1]  process id
-- ARGV[2]  TTL, milliseconds: the process ages out unless it beats again by then
-- ARGV[3]  weight: processing threads, 0 when quiet (takes no shards)
-- ARGV[4]  queues it serves (JSON list)
-- ARGV[5]  info (JSON: host, pid, threads, version, started_at, ...)
-- Writes: M processes, M process:<id>; drops processes whose beat lapsed, and
--   nudges every other live process when this one joined or changed its weight
-- Returns: {now_ms, command waiting for this process or '', then per live
--   process: id, expiry ms, weight, queues}
local M = KEYS[1]
local id, ttl, weight, queues, info = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local processes = M .. 'processes'
for _, gone in ipairs(redis.call('zrangebyscore', processes, '-inf', now)) do
  redis.call('zrem', processes, gone)
  redis.call('del', M .. 'process:' .. gone, M .. 'nudge:' .. gone)
end
local mine = M .. 'process:' .. id
local changed = redis.call('zadd', processes, now + ttl, id) == 1
  or redis.call('hget', mine, 'weight') ~= weight
redis.call('hset', mine, 'weight', weight, 'queues', queues, 'info', info, 'beat', now)
redis.call('pexpire', mine, ttl)
local command = redis.call('hget', mine, 'command') or ''
if command ~= '' then redis.call('hdel', mine, 'command') end
local out = {now, command}
local live = redis.call('zrange', processes, 0, -1, 'withscores')
for i = 1, #live, 2 do
  local other = live[i]
  local fields = redis.call('hmget', M .. 'process:' .. other, 'weight', 'queues')
  if fields[1] then
    out[#out + 1] = other
    out[#out + 1] = live[i + 1]
    out[#out + 1] = fields[1]
    out[#out + 1] = fields[2]
    if changed and other ~= id then
      local nudge = M .. 'nudge:' .. other
      if redis.call('llen', nudge) == 0 then
        redis.call('rpush', nudge, '1')
        redis.call('pexpire', nudge, ttl)
      end
    end
  end
end
return out
