-- move_read: read queued jobs for a move to another queue (Actions.move): the
-- first step of three (move_read here, move_put in the target's shard,
-- move_take back here).  Each job read is held: its perform_in moves to
-- now + ARGV[2] seconds (unless it is later already), so no pop takes it
-- between the steps; move_take gives a job left here its perform_in back.
-- An id whose batch is running (in the processing area) is not read: its
-- queued job is held too, so that its next batch does not start, and its id
-- returned; the caller reads it again once the batch ended (its payloads, a
-- failed batch's among them, then move together, in order).
-- On a shard a reshard retired, an id the reshard is moving (K.moving_set) is
-- neither read nor held, and returned: the caller moves it from its new shard.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  how long to hold the jobs read, seconds
-- ARGV[3..]  ids (of this shard)
-- Writes: perform_in_zset, the group keys (the holds)
-- Returns: {records, ids being moved by a reshard, pairs id, perform_in (before the
--   hold) of the ids whose batch is running, hold}:
--   records are `id, blob, error, group, perform_in` per job read (error: nil when
--   none; group: '' for the default one; perform_in: before the hold); a hot id's
--   payloads come packed into its blob; hold: the perform_in of the held jobs
local moving = retired() and K.moving_set
local now = clock(ARGV[1])
local hold = string.format('%.6f', tonumber(now) + tonumber(ARGV[2]))
local found, busy, running = {}, {}, {}

local function held(id)
  local perform_in = redis.call('zscore', K.perform_in_zset, id)
  if tonumber(perform_in) < tonumber(hold) then reschedule_queued(id, hold, now) end
  return perform_in
end

for i = 3, #ARGV do
  local id = ARGV[i]
  local member = nil
  if moving and redis.call('sismember', moving, id) == 1 then
    busy[#busy + 1] = id
  else
    member = find_queued(id)
  end
  if member and redis.call('hexists', K.processing_hash, id) == 1 then
    running[#running + 1] = id
    running[#running + 1] = held(id)
  elseif member then
    local blob = blob_of(member, id)
    if blob == '' then
      local rows = redis.call('zrange', K.payloads_zset(id), 0, -1, 'withscores')
      local pairs_ = {}
      for j = 1, #rows, 2 do pairs_[#pairs_ + 1] = {tonumber(rows[j + 1]), rows[j]} end
      blob = blob_pack(pairs_)
    end
    found[#found + 1] = id
    found[#found + 1] = blob
    found[#found + 1] = redis.call('hget', K.errors_hash, id) or false
    found[#found + 1] = groups().group_of(id)
    found[#found + 1] = held(id)
  end
end
return {found, busy, running, hold}
