-- pop: move up to `limit` due jobs of one shard into its processing area.
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  now
-- ARGV[3]  limit (batch size)
-- ARGV[4]  a shard of this queue whose finished batch to ack first, or "" (so a
--          thread acks its last batch and pops the next in one round trip)
-- Reads/writes: perform_in_zset(shard), fresh/retry lex zsets, retry_count_zset,
--   errors_hash, processing_hash(shard and ARGV[4]), processed_counter
-- Returns: nil when the processing area is still occupied (a batch not yet
--   acked, failed or restored); else a flat list id, retry_count, blob, ...
--   earliest perform_in first.
local shard, now, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local processing = K.processing_hash(shard)
if ARGV[4] ~= '' then ack_processing(ARGV[4]) end
if ARGV[4] ~= shard and redis.call('exists', processing) == 1 then return false end
local due = redis.call('zrangebyscore', K.perform_in_zset(shard), '-inf', now,
  'withscores', 'limit', 0, limit)
local out = {}
for i = 1, #due, 2 do
  local id, perform_in = due[i], due[i + 1]
  local member, is_retry = find_queued(id)
  if member then
    local retry_count, error = -1, nil
    if is_retry then
      retry_count = tonumber(redis.call('zscore', K.retry_count_zset, id))
      error = redis.call('hget', K.errors_hash, id) or nil
    end
    remove_queued(id, shard, member, is_retry)
    local blob = blob_of(member, id)
    redis.call('hset', processing, id, processing_pack(perform_in, retry_count, error, blob))
    out[#out + 1] = id
    out[#out + 1] = retry_count
    out[#out + 1] = blob
  else
    redis.call('zrem', K.perform_in_zset(shard), id)
  end
end
return out
