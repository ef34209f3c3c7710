-- lease_release: give up a lease (a process stopping, or a shard moving away),
-- so another process can take the shard at once instead of after the TTL.  What
-- it leaves in the processing area (a batch whose ack failed, or one not run) was
-- left on purpose: the next owner restores it without counting a restore
-- (stopping_flag, as after announce_stop).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token
-- Writes: lease, when still held by that token (deleted); stopping_flag when the
--   processing area is not empty
-- Returns: 1 when the lease was released, 0 when it was no longer held
if not lease_held(K, ARGV[1]) then return 0 end
redis.call('del', K.lease)
if redis.call('exists', K.processing_hash) == 1 then
  redis.call('set', K.stopping_flag, ARGV[1])
end
return 1
