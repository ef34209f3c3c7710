-- membership_list: every live process and what it told about itself (dashboard).
-- KEYS[1]  ownership prefix (M)
-- Reads: M processes, M process:<id> of each
-- Returns: {now_ms, then per live process: id, expiry ms, weight, queues, info, beat}
local M = KEYS[1]
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local out = {now}
local live = redis.call('zrangebyscore', M .. 'processes', now, '+inf', 'withscores')
for i = 1, #live, 2 do
  local fields = redis.call('hmget', M .. 'process:' .. live[i], 'weight', 'queues', 'info', 'ttl')
  if fields[1] then
    out[#out + 1] = live[i]
    out[#out + 1] = live[i + 1]
    for j = 1, 3 do out[#out + 1] = fields[j] or '{}' end
    -- Its last beat: its expiry less its TTL.
    out[#out + 1] = tonumber(live[i + 1]) - tonumber(fields[4] or '0')
  end
end
return out
