-- delete_failed: delete queued jobs with retry_count >= 0.
-- KEYS[1]  the shard's prefix
-- ARGV     ids (of this shard)
-- Writes: queue keys (with payloads_zset(id) of hot ids)
-- Returns: the number of jobs deleted
if retired() then return 0 end  -- its jobs moved to the new shards
local deleted = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  local member = find_member(K.retry_lex_zset, id)
  if member then
    wf_note_queued(id, member, 'c')
    delete_queued(id, member, true)
    if TRACK then track(K, 'deleted', id, 'from', 'queue') end
    deleted = deleted + 1
  end
end
return deleted
