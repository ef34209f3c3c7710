-- fail: the shard's batch raised; retry each job or move it to the morgue (SPEC §4).
-- The other jobs of the processing area (batches popped with it, performed or
-- not yet) stay there.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  now: '' for Redis's clock (a test may fix it)
-- ARGV[3]  error (already serialized)
-- ARGV[4]  max_retry_count
-- ARGV[5+2i..6+2i]  id, seconds until its retry (retry_in(retry_count + 1)): the
--   retry's perform_in is now + that, on Redis's clock
-- Writes: processing_hash (the failed jobs leave it), queue keys, morgue keys
--   (with the per-id payload sets of hot ids), failed_counter
-- Returns: flat list id, blob of the payload each job sent to the morgue;
--   error FENCED when the lease is not held
local token, now, error = ARGV[1], clock(ARGV[2]), ARGV[3]
local max_retry_count = tonumber(ARGV[4])
if not lease_held(K, token) then return fenced() end
local processing = K.processing_hash
local dead = {}
local failed = 0
local ids = {}
for i = 5, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
forget_restores(K, ids)
for i = 5, #ARGV, 2 do
  local id, retry_at = ARGV[i], tonumber(now) + tonumber(ARGV[i + 1])
  local value = redis.call('hget', processing, id)
  if value then
    failed = failed + 1
    redis.call('hdel', processing, id)
    local _, retry_count, _, blob = processing_unpack(value)
    retry_count = retry_count + 1
    if retry_count >= max_retry_count then
      local first, rest = blob_split_first(blob)
      morgue_merge(id, first, error, now)
      dead[#dead + 1] = id
      dead[#dead + 1] = first
      if rest ~= '' then queue_merge(id, rest, now, -1, nil, false, now) end
    else
      queue_merge(id, blob, retry_at, retry_count, error, false, now)
    end
  end
end
if failed > 0 then redis.call('incrby', K.failed_counter, failed) end
return dead
