-- workflow_drop: delete the queued payloads of one workflow from jobs of a shard
-- (lowkiq.workflows: cancel); each is noted discarded in the shard's outbox.  The
-- processing area is not touched: a running batch ends as it would.  Other payloads
-- of the same ids stay queued.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  the workflow's id
-- ARGV[2..]  ids (of this shard)
-- Writes: queue keys (with payloads_zset(id) of hot ids), wf_outbox_hash
-- Returns: the number of payloads deleted
local wf = ARGV[1]
local tag = '\255\254lkw' .. struct.pack('>I2', #wf) .. wf
local dropped = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local member, is_retry = find_queued(id)
  if member then
    local blob = blob_of(member, id)
    local pairs_ = {}
    if blob == '' then
      local payloads = redis.call('zrange', K.payloads_zset(id), 0, -1, 'withscores')
      for j = 1, #payloads, 2 do pairs_[#pairs_ + 1] = {tonumber(payloads[j + 1]), payloads[j]} end
    else
      pairs_ = blob_pairs(blob)
    end
    local keep, gone = {}, {}
    for _, pair in ipairs(pairs_) do
      if string.sub(pair[2], 1, #tag) == tag then gone[#gone + 1] = pair else keep[#keep + 1] = pair end
    end
    if #gone > 0 then
      wf_note(id, blob_pack(gone), 'c')
      dropped = dropped + #gone
      if #keep == 0 then
        delete_queued(id, member, is_retry)
      elseif blob == '' then
        for _, pair in ipairs(gone) do redis.call('zrem', K.payloads_zset(id), pair[2]) end
      else
        local lex = is_retry and K.retry_lex_zset or K.fresh_lex_zset
        redis.call('zrem', lex, member)
        redis.call('zadd', lex, 0, id .. '\0' .. blob_pack(keep))
      end
    end
  end
end
return dropped
