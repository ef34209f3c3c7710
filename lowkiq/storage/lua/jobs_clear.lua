-- jobs_clear: delete up to `limit` queued jobs of a shard (fresh first, then
-- retries) with their payloads; called until it returns 0.  The processing
-- area and the morgue are not touched.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  limit
-- Writes: fresh_lex_zset, retry_lex_zset, retry_count_zset, errors_hash,
--   perform_in_zset, payloads_zset(id) of hot ids
-- Returns: the number of jobs deleted (0: the shard's queue is empty)
if retired() then return 0 end  -- its jobs moved to the new shards
local limit = tonumber(ARGV[1])
local cleared = 0
local deleted_ids = {}  -- with Worker.track
for _, lex in ipairs({K.fresh_lex_zset, K.retry_lex_zset}) do
  if cleared >= limit then break end
  local members = redis.call('zrange', lex, 0, limit - cleared - 1)
  for _, member in ipairs(members) do
    local id = string.sub(member, 1, string.find(member, '\0', 1, true) - 1)
    wf_note_queued(id, member, 'c')
    delete_queued(id, member, lex == K.retry_lex_zset)
    if TRACK then deleted_ids[#deleted_ids + 1] = id end
  end
  cleared = cleared + #members
end
if TRACK and #deleted_ids > 0 then
  track(K, 'deleted', table.concat(deleted_ids, '\0'), 'from', 'queue')
end
return cleared
