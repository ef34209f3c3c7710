-- kill_failed: move queued jobs with retry_count >= 0, whole, to the morgue.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  ids (of this shard)
-- Writes: queue keys, morgue keys (a hot id's payloads_zset(id) becomes its
--   morgue_payloads_zset(id))
-- Returns: the number of jobs killed
if retired() then return 0 end  -- its jobs moved to the new shards
local now = clock(ARGV[1])
local killed = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local member = find_member(K.retry_lex_zset, id)
  if member then
    local error = redis.call('hget', K.errors_hash, id) or nil
    wf_note_queued(id, member, 'x')
    local group = remove_queued(id, member, true)
    morgue_merge(id, blob_of(member, id), error, now, K.payloads_zset(id), group)
    if TRACK then track(K, 'buried', id, 'error', error_summary(error)) end
    killed = killed + 1
  end
end
return killed
