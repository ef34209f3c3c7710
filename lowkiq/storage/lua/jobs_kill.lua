-- jobs_kill: move queued jobs (fresh or retries, due or not), whole, to the
-- morgue, merged into the morgue entry of their id (updated_at = now).  A job
-- keeps its last error; one that never failed gets ARGV[2].  The processing
-- area is not touched: a running batch of the id goes on.
-- On a shard a reshard retired, the jobs not yet read by the reshard are killed
-- in place (it moves them dead); an id it is moving (K.moving_set) is left alone
-- and returned, for the caller to act on it in its new shard once moved.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  the error of a job that has none (serialized)
-- ARGV[3..]  ids (of this shard)
-- Writes: queue keys, morgue keys (a hot id's payloads_zset(id) becomes its
--   morgue_payloads_zset(id))
-- Returns: {ids killed, ids being moved by a reshard (untouched)}
local moving = retired() and K.moving_set
local now = clock(ARGV[1])
local killed, busy = {}, {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if moving and redis.call('sismember', moving, id) == 1 then
    busy[#busy + 1] = id
  else
    local member, is_retry = find_queued(id)
    if member then
      local error = redis.call('hget', K.errors_hash, id) or ARGV[2]
      wf_note_queued(id, member, 'x')
      local group = remove_queued(id, member, is_retry)
      morgue_merge(id, blob_of(member, id), error, now, K.payloads_zset(id), group)
      if TRACK then track(K, 'buried', id, 'error', error_summary(error)) end
      killed[#killed + 1] = id
    end
  end
end
return {killed, busy}
