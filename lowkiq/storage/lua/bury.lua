-- bury: move jobs of the shard's batch, whole, to the morgue with their own
-- error, without retries (e.g. a payload the app cannot decode).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  the batch: the number its pop returned
-- ARGV[3]  now: '' for Redis's clock (a test may fix it)
-- ARGV[4+2i..5+2i]  id, error (already serialized)
-- Writes: processing_hash, morgue keys, failed_counter (+= jobs buried), wf_outbox_hash
-- Returns: the number of jobs buried; error FENCED when the lease is not held, error
--   STALE when the area holds another batch (nothing is changed)
local token, now = ARGV[1], clock(ARGV[3])
local held, in_area = lease_and_batch(K, token, ARGV[2])
if not held then return fenced() end
if not in_area then return stale_batch(ARGV[2]) end
local processing = K.processing_hash
local buried = 0
local ids = {}
for i = 4, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
forget_restores(K, ids)
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local value = redis.call('hget', processing, id)
  if value then
    local _, _, _, blob, group = processing_unpack(value)
    morgue_merge(id, blob, ARGV[i + 1], now, nil, group)
    wf_note(id, blob, 'x')
    if TRACK then track(K, 'buried', id, 'fence', token, 'error', error_summary(ARGV[i + 1])) end
    redis.call('hdel', processing, id)
    buried = buried + 1
  end
end
if buried > 0 then redis.call('incrby', K.failed_counter, buried) end
return buried
