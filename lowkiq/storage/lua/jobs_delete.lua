-- jobs_delete: delete queued jobs (fresh or retries, due or not) with their
-- payloads.  The processing area is not touched: an id being performed keeps
-- its running batch, and only what is queued for it goes.
-- KEYS[1]  the shard's prefix
-- ARGV     ids (of this shard)
-- Writes: fresh_lex_zset, retry_lex_zset, retry_count_zset, errors_hash,
--   perform_in_zset, payloads_zset(id) of hot ids
-- Returns: the number of jobs deleted
if retired() then return 0 end  -- its jobs moved to the new shards
local deleted = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  local member, is_retry = find_queued(id)
  if member then
    delete_queued(id, member, is_retry)
    if TRACK then track(K, 'deleted', id, 'from', 'queue') end
    deleted = deleted + 1
  end
end
return deleted
