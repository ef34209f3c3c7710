-- group_delete: delete up to `limit` queued jobs of one group of a shard (fresh or
-- retries, due or not) with their payloads; called until it returns 0.  The
-- processing area and the morgue are not touched: a running batch of the group ends
-- as it would.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  the group (never '': the default group is not deleted by name)
-- ARGV[2]  limit
-- Writes: fresh_lex_zset, retry_lex_zset, retry_count_zset, errors_hash,
--   perform_in_zset, the group keys, payloads_zset(id) of hot ids
-- Returns: the number of jobs deleted, then whether any id of the group is left
--   to look at (0: none; call again while 1)
if retired() then return {0, 0} end  -- its jobs moved to the new shards
local group, limit = ARGV[1], tonumber(ARGV[2])
local ids
if grouped() then
  ids = redis.call('zrange', K.group_ids_zset(group), 0, limit - 1)
elseif base_group() == group then
  -- A shard not indexed holds jobs of its base group only.
  ids = redis.call('zrange', K.perform_in_zset, 0, limit - 1)
else
  return {0, 0}
end
local deleted = {}
for _, id in ipairs(ids) do
  local member, is_retry = find_queued(id)
  if member then
    wf_note_queued(id, member, 'c')
    delete_queued(id, member, is_retry)
    deleted[#deleted + 1] = id
  elseif grouped() then
    -- An index entry without its job: it goes, so the loop ends.
    redis.call('zrem', K.group_ids_zset(group), id)
    groups().forget_if_empty(group)
  end
end
if TRACK and #deleted > 0 then
  track(K, 'deleted', table.concat(deleted, '\0'), 'from', 'queue')
end
return {#deleted, #ids == limit and 1 or 0}
