-- metrics: one queue's counts in one round trip.
-- KEYS[1]  queue prefix
-- ARGV[1]  shards_count
-- Reads: lex zsets, retry_count_zset, morgue_lex_zset, counters,
--   perform_in_zset(*), processing_hash(*)
-- Returns: fresh, retries, morgue_length, processed, failed, busy,
--   earliest perform_in of all shards as a string (false when empty)
local busy = 0
local earliest = nil
for shard = 0, tonumber(ARGV[1]) - 1 do
  busy = busy + redis.call('hlen', K.processing_hash(shard))
  local head = redis.call('zrange', K.perform_in_zset(shard), 0, 0, 'withscores')
  if head[2] and (earliest == nil or tonumber(head[2]) < tonumber(earliest)) then
    earliest = head[2]
  end
end
return {
  redis.call('zcard', K.fresh_lex_zset),
  redis.call('zcard', K.retry_lex_zset),
  redis.call('zcard', K.morgue_lex_zset),
  tonumber(redis.call('get', K.processed_counter) or '0'),
  tonumber(redis.call('get', K.failed_counter) or '0'),
  busy,
  earliest or false,
}
