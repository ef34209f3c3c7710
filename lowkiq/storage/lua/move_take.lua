-- move_take: the last step of a move: take out of this shard's queued jobs
-- the payloads move_put has written into the target queue, and only those
-- (the same payload with the same score), so a payload enqueued meanwhile
-- stays.  A job left with no payload is removed; one left with some keeps its
-- retry_count and error, and gets back the perform_in it had before move_read
-- held it (when it is still held).  An empty blob takes nothing: it only gives
-- a held job its perform_in back (a move that gave up on an id).
-- On a shard a reshard retired, an id the reshard is moving (K.moving_set), or
-- gone from here, is left alone and returned: the caller takes its payloads
-- out of its new shard once it is moved.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  the name of the queue the jobs moved to (for the events)
-- ARGV[2]  hold: the perform_in move_read gave the jobs it held
-- ARGV[3..]  triples id, blob (as move_read returned them), perform_in before the hold
-- Writes: queue keys (with payloads_zset(id) of hot ids), the group keys
-- Returns: {the number of jobs removed whole, ids to take from their new shard}
local retiring = retired()
local moving = retiring and K.moving_set
local hold = tonumber(ARGV[2])
local now = clock('')
local removed = 0

-- The payloads of `blob` not in `copied` with the same score (payloads of one
-- blob are distinct, so a payload -> score table holds a blob).
local function kept_pairs(blob, copied)
  local taken = {}
  for _, pair in ipairs(blob_pairs(copied)) do taken[pair[2]] = pair[1] end
  local kept = {}
  for _, pair in ipairs(blob_pairs(blob)) do
    if taken[pair[2]] ~= pair[1] then kept[#kept + 1] = pair end
  end
  return kept
end

local elsewhere = {}
for i = 3, #ARGV, 3 do
  local id, copied, perform_in = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local member, is_retry = nil, nil
  if not (moving and redis.call('sismember', moving, id) == 1) then
    member, is_retry = find_queued(id)
  end
  if not member then
    if retiring and copied ~= '' then elsewhere[#elsewhere + 1] = id end
  elseif copied == '' then
    if tonumber(redis.call('zscore', K.perform_in_zset, id)) == hold then
      reschedule_queued(id, perform_in, now)
    end
  else
    if TRACK then track(K, 'moved', id, 'to', ARGV[1]) end
    local blob = blob_of(member, id)
    local left = 0  -- payloads the job keeps (none when it is as it was read)
    if blob ~= copied and blob ~= '' then
      local kept = kept_pairs(blob, copied)
      left = #kept
      if left > 0 then
        local lex = is_retry and K.retry_lex_zset or K.fresh_lex_zset
        redis.call('zrem', lex, member)
        redis.call('zadd', lex, 0, id .. '\0' .. blob_pack(kept))
      end
    elseif blob == '' then
      local key = K.payloads_zset(id)
      local pairs_ = blob_pairs(copied)
      for first = 1, #pairs_, ZADD_CHUNK do
        local last = math.min(first + ZADD_CHUNK - 1, #pairs_)
        local payloads = {}
        for n = first, last do payloads[#payloads + 1] = pairs_[n][2] end
        local scores = redis.call('zmscore', key, unpack(payloads))
        local gone = {}
        for n = first, last do
          local score = scores[n - first + 1]
          if score and tonumber(score) == pairs_[n][1] then gone[#gone + 1] = pairs_[n][2] end
        end
        if #gone > 0 then redis.call('zrem', key, unpack(gone)) end
      end
      left = redis.call('zcard', key)
    end
    if left == 0 then
      delete_queued(id, member, is_retry)
      removed = removed + 1
    elseif tonumber(redis.call('zscore', K.perform_in_zset, id)) == hold then
      reschedule_queued(id, perform_in, now)
    end
  end
end
return {removed, elsewhere}
