-- ack: the shard's batch succeeded; clear its processing area.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- Writes: processing_hash, processed_counter (+= jobs in the batch)
-- Returns: the number of jobs acked; error FENCED when the lease is not held
if not lease_held(K, ARGV[1]) then return fenced() end
return ack_processing(K, nil, ARGV[1])
