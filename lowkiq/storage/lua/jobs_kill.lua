-- jobs_kill: move queued jobs (fresh or retries, due or not), whole, to the
-- morgue, merged into the morgue entry of their id (updated_at = now).  A job
-- keeps its last error; one that never failed gets ARGV[2].  The processing
-- area is not touched: a running batch of the id goes on.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  the error of a job that has none (serialized)
-- ARGV[3..]  ids (of this shard)
-- Writes: queue keys, morgue keys (a hot id's payloads_zset(id) becomes its
--   morgue_payloads_zset(id))
-- Returns: the number of jobs killed
if retired() then return 0 end  -- its jobs moved to the new shards
local now = clock(ARGV[1])
local killed = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local member, is_retry = find_queued(id)
  if member then
    local error = redis.call('hget', K.errors_hash, id) or ARGV[2]
    local group = remove_queued(id, member, is_retry)
    morgue_merge(id, blob_of(member, id), error, now, K.payloads_zset(id), group)
    if TRACK then track(K, 'buried', id, 'error', error_summary(error)) end
    killed = killed + 1
  end
end
return killed
