-- history_add: add one process's counts of one minute to a queue's metrics history.
-- KEYS[1]  the queue's metrics prefix, lowkiq:{name:metrics}: (not a shard's)
-- ARGV[1]  minute (unix time // 60)
-- ARGV[2]  unix time at which the minute's hash expires
-- ARGV[3], ARGV[4], ...  field, increment pairs (fields: lowkiq/telemetry/counts.py)
-- Writes: KEYS[1] .. 'minute:' .. minute (hash, += each increment; expires at ARGV[2]),
--         KEYS[1] .. 'totals' (hash, += each increment; never expires)
-- Returns: the number of fields added to
local minute = KEYS[1] .. 'minute:' .. ARGV[1]
local totals = KEYS[1] .. 'totals'
for i = 3, #ARGV - 1, 2 do
  redis.call('HINCRBY', minute, ARGV[i], ARGV[i + 1])
  redis.call('HINCRBY', totals, ARGV[i], ARGV[i + 1])
end
redis.call('EXPIREAT', minute, ARGV[2])
return (#ARGV - 2) / 2
