-- lease_acquire: take a shard that nobody holds, and put back the batch its
-- previous owner left in processing (only the new owner ever restores).
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  owner (process id)
-- ARGV[3]  lease TTL, milliseconds (expiry on Redis's clock)
-- ARGV[4]  now
-- Writes: epoch_counter(shard) (+1), lease(shard), processing_hash(shard), queue keys
-- Returns: {token, jobs restored}, token being `epoch owner`; or, when another
--   lease is current, {false, milliseconds it has left}
local shard, owner, ttl, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local lease = K.lease(shard)
local left = redis.call('pttl', lease)
if left ~= -2 then return {false, left} end
local epoch = redis.call('incr', K.epoch_counter(shard))
local token = epoch .. ' ' .. owner
redis.call('set', lease, token, 'px', ttl)
return {token, restore_processing(shard, now)}
