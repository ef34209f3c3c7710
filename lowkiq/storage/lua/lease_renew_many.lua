-- lease_renew_many: extend every lease a process holds on one Redis server, in one
-- call (a single server only: the leases of different shards are in different slots).
-- KEYS[1]  the first shard's prefix (the others are derived from ARGV)
-- ARGV[1]  lease TTL, milliseconds
-- ARGV[2..] pairs: a shard's prefix, the lease token held on it
-- Writes: each lease still held by its token (expiry only)
-- Returns: per pair, 1 when renewed, 0 when that lease is no longer held
local ttl = ARGV[1]
local out = {}
for i = 2, #ARGV, 2 do
  local lease = keys_at(ARGV[i]).lease
  if redis.call('get', lease) == ARGV[i + 1] then
    redis.call('pexpire', lease, ttl)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
