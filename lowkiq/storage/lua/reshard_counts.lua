-- reshard_counts: take the processed and failed counters of an emptied old
-- shard (they are added to a new shard's, so the queue's totals stay).
-- KEYS[1]  the old shard's prefix
-- Writes: processed_counter, failed_counter (deleted)
-- Returns: {processed, failed}
local processed = tonumber(redis.call('get', K.processed_counter) or '0')
local failed = tonumber(redis.call('get', K.failed_counter) or '0')
redis.call('del', K.processed_counter, K.failed_counter)
return {processed, failed}
