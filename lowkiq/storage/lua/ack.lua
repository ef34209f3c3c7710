-- ack: the shard's batch succeeded; clear its processing area.
-- KEYS[1]  queue prefix
-- ARGV[1]  shard
-- ARGV[2]  lease token of the shard
-- Writes: processing_hash(shard), processed_counter (+= jobs in the batch)
-- Returns: the number of jobs acked; error FENCED when the lease is not held
if not lease_held(ARGV[1], ARGV[2]) then return fenced(ARGV[1]) end
return ack_processing(ARGV[1])
