-- jobs_perform_now: make queued jobs due now: a job not yet due gets
-- perform_in = now; a due one keeps its place.  retry_count and error stay.
-- On a shard a reshard retired, the jobs not yet read by the reshard change in
-- place; an id it is moving (K.moving_set) is left alone and returned, for the
-- caller to act on it in its new shard once moved.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  ids (of this shard; at most a thousand or so a call)
-- Writes: perform_in_zset, the group keys, wake_list
-- Returns: {ids queued (all now due), ids being moved by a reshard (untouched)}
if #ARGV < 2 then return {{}, {}} end
local moving = retired() and K.moving_set
local now = clock(ARGV[1])
local at = tonumber(now)
local ids = {unpack(ARGV, 2)}
local scores = redis.call('zmscore', K.perform_in_zset, unpack(ids))
local found, busy, moved = {}, {}, false
for n, id in ipairs(ids) do
  local score = scores[n]
  if moving and redis.call('sismember', moving, id) == 1 then
    busy[#busy + 1] = id
  elseif score then
    found[#found + 1] = id
    if tonumber(score) > at then
      reschedule_queued(id, now, now)
      moved = true
    end
  end
end
if moved then wake() end
return {found, busy}
