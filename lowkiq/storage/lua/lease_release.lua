-- lease_release: give up a lease (a process stopping, or a shard moving away),
-- so another process can take the shard at once instead of after the TTL.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token
-- Writes: lease, when still held by that token (deleted)
-- Returns: 1 when the lease was released, 0 when it was no longer held
if not lease_held(K, ARGV[1]) then return 0 end
redis.call('del', K.lease)
return 1
