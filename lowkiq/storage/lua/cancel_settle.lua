-- cancel_settle: the performing process settles the jobs of its batch that
-- Worker.actions().cancel cancelled, once their perform ended: they leave the
-- processing area as cancelled (acked: not failed, not retried, not dead, their
-- payloads dropped), counted in cancelled_counter; the rest of the batch is acked,
-- failed or yielded as usual afterwards.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  the batch: the number its pop returned
-- ARGV[3..]  the cancelled ids
-- Writes: processing_hash, cancelled_hash, restores_hash, cancelled_counter,
--   wf_outbox_hash
-- Returns: how many jobs were settled as cancelled; error FENCED when the lease is
--   not held, error STALE when the area holds another batch (nothing is changed)
local token = ARGV[1]
local held, in_area = lease_and_batch(K, token, ARGV[2])
if not held then return fenced() end
if not in_area then return stale_batch(ARGV[2]) end
local ids = {}
for i = 3, #ARGV do
  local value = redis.call('hget', K.processing_hash, ARGV[i])
  if value then
    ids[#ids + 1] = ARGV[i]
    local _, _, _, blob = processing_unpack(value)
    wf_note(ARGV[i], blob, 'c')
  end
end
if #ids == 0 then return 0 end
call_many('hdel', K.processing_hash, ids)
call_many('hdel', K.cancelled_hash, ids)
forget_restores(K, ids)
redis.call('incrby', K.cancelled_counter, #ids)
if TRACK then track(K, 'cancelled', table.concat(ids, '\0'), 'fence', token) end
return #ids
