-- lease_renew: extend the leases a process holds on shards of one queue.
-- KEYS[1]  queue prefix
-- ARGV[1]  lease TTL, milliseconds
-- ARGV[2+2i..3+2i]  shard, lease token
-- Writes: lease(shard) of each (expiry only)
-- Returns: per shard, 1 when renewed, 0 when that lease is no longer held
local ttl = ARGV[1]
local renewed = {}
for i = 2, #ARGV, 2 do
  if lease_held(ARGV[i], ARGV[i + 1]) then
    redis.call('pexpire', K.lease(ARGV[i]), ttl)
    renewed[#renewed + 1] = 1
  else
    renewed[#renewed + 1] = 0
  end
end
return renewed
