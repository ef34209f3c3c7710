-- reshard_take: read (not remove) up to `limit` jobs of a retired shard whose
-- processing area is empty: queued jobs first, then dead ones.  The shard is
-- frozen (no push, no pop), and the ids read are marked moving (K.moving_set):
-- an action leaves them alone (and waits) until reshard_drop removes them, after
-- the jobs were merged into the new shards, so what is read stays as it is.  An
-- action acts in place on the ids not marked, which are read later as they are then.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  limit
-- Reads: queue keys (with due_since_zset), morgue keys (hot ids' payload sorted sets in full)
-- Writes: moving_set (the ids read)
-- Returns: a flat list of records of 8 fields: kind ('q' queued, 'm' dead),
--   id, perform_in (queued) or updated_at (dead), retry_count ('' when dead),
--   '1' when it has an error else '0', the error or '', the payloads as a blob,
--   the group ('': the default one)
if not retired() then return redis.error_reply('NOTRETIRED ' .. P .. ': the shard is not retired') end
if redis.call('exists', K.processing_hash) == 1 then
  return redis.error_reply('BUSY ' .. P .. ': a batch of the shard is still running')
end
local limit = tonumber(ARGV[1])
local out = {}

local function full_blob(blob, key)
  if blob ~= '' then return blob end
  local rows = redis.call('zrange', key, 0, -1, 'withscores')
  local pairs_ = {}
  for i = 1, #rows, 2 do pairs_[#pairs_ + 1] = {tonumber(rows[i + 1]), rows[i]} end
  return blob_pack(pairs_)
end

local function add(kind, id, at, retry_count, error, blob, group)
  redis.call('sadd', K.moving_set, id)
  out[#out + 1] = kind
  out[#out + 1] = id
  out[#out + 1] = at
  out[#out + 1] = retry_count
  out[#out + 1] = error and '1' or '0'
  out[#out + 1] = error or ''
  out[#out + 1] = blob
  out[#out + 1] = group or ''
end

local queued = redis.call('zrange', K.perform_in_zset, 0, limit - 1, 'withscores')
for i = 1, #queued, 2 do
  local id = queued[i]
  local member, is_retry = find_queued(id)
  if member then
    local retry_count = '-1'
    if is_retry then retry_count = redis.call('zscore', K.retry_count_zset, id) end
    local error = redis.call('hget', K.errors_hash, id) or nil
    local blob, at = blob_of(member, id), queued[i + 1]
    -- A hot id that yielded to the due ids (pop.lua) moves with the time it became due.
    if blob == '' then at = redis.call('zscore', K.due_since_zset, id) or at end
    local group = groups().group_of(id)
    add('q', id, at, retry_count, error, full_blob(blob, K.payloads_zset(id)), group)
  end
end
local room = limit - #out / 8
if room > 0 then
  local dead = redis.call('zrange', K.morgue_updated_at_zset, 0, room - 1, 'withscores')
  for i = 1, #dead, 2 do
    local id = dead[i]
    local member = find_member(K.morgue_lex_zset, id)
    if member then
      local error = redis.call('hget', K.morgue_errors_hash, id) or nil
      add('m', id, dead[i + 1], '', error, full_blob(blob_of(member, id), K.morgue_payloads_zset(id)),
        redis.call('hget', K.morgue_group_of_hash, id))
    end
  end
end
return out
