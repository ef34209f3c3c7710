-- ack: the shard's batch succeeded; clear its processing area.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  the batch: the number its pop returned
-- Writes: processing_hash, processed_counter (+= jobs in the batch)
-- Returns: the number of jobs acked; error FENCED when the lease is not held, error
--   STALE when the area holds another batch (nothing is acked)
if not lease_held(K, ARGV[1]) then return fenced() end
if not batch_in_area(K, ARGV[2]) then return stale_batch(K, ARGV[2]) end
return ack_processing(K, nil, ARGV[1])
