-- restore: put a shard's processing area back into the queue (the lease holder:
-- a batch it did not run, or, after a Redis error left the area's state
-- unknown, whatever batch the area holds).
-- The processing copy's perform_in, retry_count and error win (SPEC §3 rule 3).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  the batch: the number its pop returned; '' for whatever the area holds
-- ARGV[3]  now: '' for Redis's clock (a test may fix it)
-- ARGV[4]  optional: why the batch goes back unrun, for the job events
--          (lowkiq.storage.processing.RESTORE_REASONS)
-- Writes: processing_hash, queue keys (with payloads_zset(id) of hot ids)
-- Returns: the number of jobs restored; error FENCED when the lease is not held,
--   error STALE when the area holds another batch than the one named (nothing is
--   changed)
local held, in_area = lease_and_batch(K, ARGV[1], ARGV[2])
if not held then return fenced() end
if ARGV[2] ~= '' and not in_area then return stale_batch(ARGV[2]) end
local reason = ARGV[4]
if reason == '' then reason = nil end
return (restore_processing(clock(ARGV[3]), nil, nil, ARGV[1], reason))
