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
--   perform_in_zset, payloads_zset(id) of hot ids
-- Returns: {ids whose queued job was deleted, ids being moved by a reshard
--   (untouched), ids running, the number of the batch in processing (0: none)}
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
      delete_queued(id, member, is_retry)
      if TRACK then track(K, 'deleted', id, 'from', 'queue', 'by', 'cancel') end
      deleted[#deleted + 1] = id
    end
    if in_area[i] then running[#running + 1] = id end
  end
end
local batch = 0
if #running > 0 then batch = tonumber(redis.call('get', K.batch_counter) or '0') end
return {deleted, busy, running, batch}
