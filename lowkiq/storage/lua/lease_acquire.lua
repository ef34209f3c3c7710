-- lease_acquire: take a shard that nobody holds, and put back the batch its
-- previous owner left in processing (only the new owner ever restores).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  owner (process id)
-- ARGV[2]  lease TTL, milliseconds (expiry on Redis's clock)
-- ARGV[3]  now: '' for Redis's clock (a test may fix it)
-- Writes: epoch_counter (+1), lease, processing_hash, queue keys
-- Returns: {token, jobs restored}, token being `epoch owner`; or, when another
--   lease is current, {false, milliseconds it has left}
local owner, ttl, now = ARGV[1], ARGV[2], clock(ARGV[3])
local lease = K.lease
local left = redis.call('pttl', lease)
if left ~= -2 then return {false, left} end
local epoch = redis.call('incr', K.epoch_counter)
local token = epoch .. ' ' .. owner
redis.call('set', lease, token, 'px', ttl)
return {token, restore_processing(now)}
