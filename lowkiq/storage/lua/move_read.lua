-- move_read: read queued jobs for a move to another queue (Actions.move): the
-- first step of three (move_read here, move_put in the target's shard,
-- move_take back here); changes nothing.
-- KEYS[1]  the shard's prefix
-- ARGV     ids (of this shard)
-- Returns: for each queued id, `id, blob, error, group` (error: nil when none;
--   group: '' for the default one); a hot id's payloads come packed into its blob
if retired() then return {} end  -- its jobs moved to the new shards
local found = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  local member = find_queued(id)
  if member then
    local blob = blob_of(member, id)
    if blob == '' then
      local rows = redis.call('zrange', K.payloads_zset(id), 0, -1, 'withscores')
      local pairs_ = {}
      for j = 1, #rows, 2 do pairs_[#pairs_ + 1] = {tonumber(rows[j + 1]), rows[j]} end
      blob = blob_pack(pairs_)
    end
    found[#found + 1] = id
    found[#found + 1] = blob
    found[#found + 1] = redis.call('hget', K.errors_hash, id)
    found[#found + 1] = groups().group_of(id)
  end
end
return found
