-- lease_acquire: take a shard that nobody else holds, and put back the batch its
-- previous owner left in processing (only the new owner ever restores); a job
-- restored `max_restores` times (its process died running it that often) goes
-- to the morgue instead.
-- The owner holding the lease already gets a new epoch at once, like anybody
-- taking a free shard: its call was retried after its first reply was lost (the
-- shard would else sit idle for a TTL), or it restarted with the same owner id.
-- The new epoch fences whatever that owner still ran under the old token, so
-- restoring the batch it left is as safe as after a crash.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  owner (process id)
-- ARGV[2]  lease TTL, milliseconds (expiry on Redis's clock)
-- ARGV[3]  now: '' for Redis's clock (a test may fix it)
-- ARGV[4]  max_restores (the worker's), or '' not to count restores
-- ARGV[5]  the error of a job moved to the morgue for it (already serialized)
-- Writes: epoch_counter (the new epoch), lease, stopping_flag, processing_hash, queue keys,
--   restores_hash, morgue keys, failed_counter
-- Returns: {token, jobs restored, {id, blob of each job moved to the morgue}},
--   token being `epoch owner`; or, when another owner's lease is current,
--   {false, milliseconds it has left}
local owner, ttl, now = ARGV[1], ARGV[2], clock(ARGV[3])
local lease = K.lease
local current = redis.call('get', lease)
if current then
  local space = string.find(current, ' ', 1, true)
  if not space or string.sub(current, space + 1) ~= owner then
    return {false, redis.call('pttl', lease)}
  end
end
-- The epoch never goes backwards, also when Redis lost the counter (a restart
-- without persistence, a failover to a replica that lagged): it is more than the
-- last one and at least Redis's time in milliseconds; with the counter gone, the
-- lease TTL more, so that a clock set back by less than the TTL is still safe.
local last = tonumber(redis.call('get', K.epoch_counter))
local time = redis.call('time')
local floor = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if not last then floor = floor + tonumber(ttl) end
local epoch = string.format('%d', math.max((last or 0) + 1, floor))
redis.call('set', K.epoch_counter, epoch)
local token = epoch .. ' ' .. owner
redis.call('set', lease, token, 'px', ttl)
-- A batch its owner left while stopping on purpose (announce_stop) is not a
-- death: its restore is not counted.
local max_restores = tonumber(ARGV[4])
if redis.call('get', K.stopping_flag) then
  redis.call('del', K.stopping_flag)
  max_restores = nil
end
local restored, dead = restore_processing(now, max_restores, ARGV[5], token)
return {token, restored, dead}
