-- jobs_cancel: cancel ids of one shard (Worker.actions().cancel): their queued jobs
-- are deleted with their payloads (as jobs_delete does), and the ids whose batch is
-- running (in the processing area) are named with the number of that batch, for the
-- caller to announce them to the process performing it.  The processing area is not
-- touched: the performing process settles its cancelled jobs (cancel_settle.lua).
-- On a shard a reshard retired, an id it is moving (K.moving_set) is left alone and
-- returned, for the caller to act on it in its new shard once moved.
-- KEYS[1]  the shard's prefix
-- ARGV     ids (of this shard)
-- Writes: fresh_lex_zset, retry_lex_zset, retry_count_zset, errors_hash,
--   perform_in_zset, payloads_zset(id) of hot ids, cancelled_hash
-- Returns: {ids whose queued job was deleted, ids being moved by a reshard
--   (untouched), ids running, the number of the batch in processing (0: none)}
local CANCELLED_KEEP_MS = 86400000  -- a day
local moving = retired() and K.moving_set
local deleted, busy = {}, {}
local running = {}
local in_area = redis.call('hmget', K.processing_hash, unpack(ARGV))
for i = 1, #ARGV do
  local id = ARGV[i]
  if moving and redis.call('sismember', moving, id) == 1 then
    busy[#busy + 1] = id
  else
    local member, is_retry = find_queued(id)
    if member then
      wf_note_queued(id, member, 'c')
      delete_queued(id, member, is_retry)
      if TRACK then track(K, 'deleted', id, 'from', 'queue', 'by', 'cancel') end
      deleted[#deleted + 1] = id
    end
    if in_area[i] then running[#running + 1] = id end
  end
end
local batch = 0
if #running > 0 then
  batch = redis.call('get', K.batch_counter) or '0'
  -- Should the batch go back to the queue instead of ending (its process dies, its
  -- shard is handed over before it ran), these jobs do not (restore_processing).
  local fields = {}
  for _, id in ipairs(running) do
    fields[#fields + 1] = id
    fields[#fields + 1] = batch
  end
  redis.call('hset', K.cancelled_hash, unpack(fields))
  redis.call('pexpire', K.cancelled_hash, CANCELLED_KEEP_MS)
end
return {deleted, busy, running, tonumber(batch)}
