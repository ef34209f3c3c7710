-- fail: the shard's batch raised; retry each job or move it to the morgue (SPEC §4).
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  lease token of the shard
-- ARGV[3]  now
-- ARGV[4]  error (already serialized)
-- ARGV[5]  max_retry_count
-- ARGV[6+2i..7+2i]  id, perform_in of its retry (now + retry_in(retry_count + 1))
-- Writes: processing_hash(shard), queue keys, morgue keys (with the per-id
--   payload sets of hot ids), failed_counter
-- Returns: flat list id, blob of the payload each job sent to the morgue;
--   error FENCED when the lease is not held
local shard, token, now, error = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local max_retry_count = tonumber(ARGV[5])
if not lease_held(shard, token) then return fenced(shard) end
local processing = K.processing_hash(shard)
local dead = {}
for i = 6, #ARGV, 2 do
  local id, retry_at = ARGV[i], ARGV[i + 1]
  local value = redis.call('hget', processing, id)
  if value then
    local _, retry_count, _, blob = processing_unpack(value)
    retry_count = retry_count + 1
    if retry_count >= max_retry_count then
      local first, rest = blob_split_first(blob)
      morgue_merge(id, first, error, now)
      dead[#dead + 1] = id
      dead[#dead + 1] = first
      if rest ~= '' then queue_merge(id, shard, rest, now, -1, nil, false, now) end
    else
      queue_merge(id, shard, blob, retry_at, retry_count, error, false, now)
    end
  end
end
local count = redis.call('hlen', processing)
redis.call('del', processing)
redis.call('incrby', K.failed_counter, count)
return dead
