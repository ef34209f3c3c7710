-- jobs_delete: delete queued jobs (fresh or retries, due or not) with their
-- payloads.  The processing area is not touched: an id being performed keeps
-- its running batch, and only what is queued for it goes.
-- On a shard a reshard retired, the jobs not yet read by the reshard are deleted
-- in place; an id it is moving (K.moving_set) is left alone and returned, for the
-- caller to act on it in its new shard once moved.
-- KEYS[1]  the shard's prefix
-- ARGV     ids (of this shard)
-- Writes: fresh_lex_zset, retry_lex_zset, retry_count_zset, errors_hash,
--   perform_in_zset, payloads_zset(id) of hot ids
-- Returns: {ids deleted, ids being moved by a reshard (untouched)}
local moving = retired() and K.moving_set
local deleted, busy = {}, {}
for i = 1, #ARGV do
  local id = ARGV[i]
  if moving and redis.call('sismember', moving, id) == 1 then
    busy[#busy + 1] = id
  else
    local member, is_retry = find_queued(id)
    if member then
      wf_note_queued(id, member, 'c')
      delete_queued(id, member, is_retry)
      if TRACK then track(K, 'deleted', id, 'from', 'queue') end
      deleted[#deleted + 1] = id
    end
  end
end
return {deleted, busy}
