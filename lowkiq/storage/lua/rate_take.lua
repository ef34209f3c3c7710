-- rate_take: reserve tokens of a worker's rate-limit bucket for one shard, on a
-- Redis Cluster (where a shard's pop cannot reach the bucket's slot); the
-- next pop of the shard adds them to its budget (its ARGV[8]).
-- KEYS[1]  the bucket `lowkiq:{name:rate}:bucket`
-- ARGV[1]  tokens per ms
-- ARGV[2]  the bucket's capacity (burst)
-- ARGV[3]  how many tokens at most
-- ARGV[4]  the grid (ms) a reservation that waits for the refill is paid on, or 0
-- Writes: the bucket (see _common.lua)
-- Returns: {tokens reserved, ms to wait before spending them (0: now)}
local R = rate_limits()
local now = R.clock_ms()
local tokens, from = R.bucket_reserve(KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[1]),
  tonumber(ARGV[2]), now, tonumber(ARGV[4] or '') or 0)
return {tokens, math.max(0, math.ceil(from - now))}
