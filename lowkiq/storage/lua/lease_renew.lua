-- lease_renew: extend a process's lease on a shard.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease TTL, milliseconds
-- ARGV[2]  lease token
-- Writes: lease (expiry only)
-- Returns: 1 when renewed, 0 when that lease is no longer held
if not lease_held(K, ARGV[2]) then return 0 end
redis.call('pexpire', K.lease, ARGV[1])
return 1
