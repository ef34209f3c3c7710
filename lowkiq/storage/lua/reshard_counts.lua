-- reshard_counts: take the processed, failed, discarded, snoozed and cancelled counters of an
-- emptied old shard (they are added to a new shard's, so the queue's totals stay).
-- KEYS[1]  the old shard's prefix
-- Writes: processed_counter, failed_counter, discarded_counter, snoozed_counter,
--   cancelled_counter (deleted)
-- Returns: {processed, failed, discarded, snoozed, cancelled}
local processed = tonumber(redis.call('get', K.processed_counter) or '0')
local failed = tonumber(redis.call('get', K.failed_counter) or '0')
local discarded = tonumber(redis.call('get', K.discarded_counter) or '0')
local snoozed = tonumber(redis.call('get', K.snoozed_counter) or '0')
local cancelled = tonumber(redis.call('get', K.cancelled_counter) or '0')
redis.call('del', K.processed_counter, K.failed_counter, K.discarded_counter, K.snoozed_counter,
  K.cancelled_counter)
return {processed, failed, discarded, snoozed, cancelled}
