-- metrics: one shard's counts in one call.
-- KEYS[1]  the shard's prefix
-- Reads: lex zsets, morgue_lex_zset, counters, perform_in_zset, due_since_zset,
--   processing_hash
-- Returns: fresh, retries, morgue_length, processed, failed, busy, earliest
--   perform_in as a string (false when the shard is empty), now on Redis's
--   clock as a string (the lag is measured on it), discarded, and the earliest time
--   a hot id that yielded to the due ids first became due (false when none did;
--   see pop.lua), the calls that named a batch no longer in processing, snoozed,
--   and cancelled
return {
  redis.call('zcard', K.fresh_lex_zset),
  redis.call('zcard', K.retry_lex_zset),
  redis.call('zcard', K.morgue_lex_zset),
  tonumber(redis.call('get', K.processed_counter) or '0'),
  tonumber(redis.call('get', K.failed_counter) or '0'),
  redis.call('hlen', K.processing_hash),
  redis.call('zrange', K.perform_in_zset, 0, 0, 'withscores')[2] or false,
  clock(),
  tonumber(redis.call('get', K.discarded_counter) or '0'),
  redis.call('zrange', K.due_since_zset, 0, 0, 'withscores')[2] or false,
  tonumber(redis.call('get', K.stale_counter) or '0'),
  tonumber(redis.call('get', K.snoozed_counter) or '0'),
  tonumber(redis.call('get', K.cancelled_counter) or '0'),
}
