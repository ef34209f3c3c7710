-- membership_snapshot: the live processes as the assigner needs them, with the
-- membership version they are and the generation of the published assignment (one
-- read, so the version, the generation and the list agree).
-- KEYS[1]  ownership prefix (M)
-- Reads: M state (version, generation), M processes, M process:<id> of each live process
-- Returns: {membership version, assignment generation, then per live process: id,
--   weight, queues, when it joined (Redis's time in ms; 0 when not recorded)}
local M = KEYS[1]
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local state = redis.call('hmget', M .. 'state', 'version', 'generation')
local out = {tonumber(state[1] or '0'), tonumber(state[2] or '0')}
for _, id in ipairs(redis.call('zrangebyscore', M .. 'processes', now, '+inf')) do
  local fields = redis.call('hmget', M .. 'process:' .. id, 'weight', 'queues', 'joined')
  if fields[1] then
    out[#out + 1] = id
    out[#out + 1] = fields[1]
    out[#out + 1] = fields[2]
    out[#out + 1] = fields[3] or '0'
  end
end
return out
