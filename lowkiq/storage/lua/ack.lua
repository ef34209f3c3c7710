-- ack: the shard's batch succeeded; clear its processing area.
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- Writes: processing_hash(shard), processed_counter (+= jobs in the batch)
-- Returns: the number of jobs acked
return ack_processing(ARGV[1])
