-- jobs_perform_now: make queued jobs due now: a job not yet due gets
-- perform_in = now; a due one keeps its place.  retry_count and error stay.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  ids (of this shard; at most a thousand or so a call)
-- Writes: perform_in_zset, the group keys, wake_list
-- Returns: the number of these ids that are queued (all now due)
if retired() or #ARGV < 2 then return 0 end  -- a retired shard's jobs moved on
local now = clock(ARGV[1])
local at = tonumber(now)
local ids = {unpack(ARGV, 2)}
local scores = redis.call('zmscore', K.perform_in_zset, unpack(ids))
local found, moved = 0, false
for n, id in ipairs(ids) do
  local score = scores[n]
  if score then
    found = found + 1
    if tonumber(score) > at then
      reschedule_queued(id, now, now)
      moved = true
    end
  end
end
if moved then wake() end
return found
