-- ack: the shard's batch succeeded; clear its processing area.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  the batch: the number its pop returned
-- ARGV[3]  optional: '1' when the batch holds workflow members: they are done (see
--          wf_copy_area)
-- Writes: processing_hash, processed_counter (+= jobs in the batch), wf_outbox_hash and
--   wf_done_hash(batch) with ARGV[3]
-- Returns: the number of jobs acked; error FENCED when the lease is not held, error
--   STALE when the area holds another batch (nothing is acked)
local held, in_area = lease_and_batch(K, ARGV[1], ARGV[2])
if not held then return fenced() end
if not in_area then return stale_batch(ARGV[2]) end
if ARGV[3] == '1' then wf_copy_area(K, ARGV[2]) end
return ack_processing(K, nil, ARGV[1])
