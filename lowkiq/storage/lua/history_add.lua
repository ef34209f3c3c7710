-- history_add: add one process's counts of one minute to a queue's metrics history.
-- KEYS[1]  the queue's metrics prefix, lowkiq:{name:metrics}: (not a shard's)
-- ARGV[1]  minute (unix time // 60)
-- ARGV[2]  retention: seconds a span is kept after it ends
-- ARGV[3], ARGV[4], ...  field, increment pairs (fields: lowkiq/telemetry/counts.py)
-- Writes, each field += its increment:
--   KEYS[1] .. 'minute:' .. minute, KEYS[1] .. '10min:' .. minute // 10 and
--   KEYS[1] .. 'hour:' .. minute // 60 (hashes, each expiring ARGV[2] seconds after
--   its span ends), and KEYS[1] .. 'totals' (hash; never expires)
-- Returns: the number of fields added to
local minute = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local spans = {}
for _, span in ipairs({{'minute:', 1}, {'10min:', 10}, {'hour:', 60}}) do
  local number = math.floor(minute / span[2])
  spans[#spans + 1] = {KEYS[1] .. span[1] .. number, (number + 1) * span[2] * 60 + retention}
end
local totals = KEYS[1] .. 'totals'
for i = 3, #ARGV - 1, 2 do
  redis.call('HINCRBY', totals, ARGV[i], ARGV[i + 1])
  for _, span in ipairs(spans) do
    redis.call('HINCRBY', span[1], ARGV[i], ARGV[i + 1])
  end
end
for _, span in ipairs(spans) do
  redis.call('EXPIREAT', span[1], span[2])
end
return (#ARGV - 2) / 2
