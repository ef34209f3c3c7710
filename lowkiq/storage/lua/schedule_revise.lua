-- schedule_revise: a periodic job's definition changed at run time (paused, resumed,
-- its ticks changed, added, removed, reset): record its revision in the job id's
-- shard, where schedule_tick reads it, so that from now on a process that still
-- follows an older definition passes no tick (schedule_tick refuses it), and the
-- new definition starts at its first tick after now (`last` = now: ticks of the
-- old definition are not caught up).  Revisions only grow; an older one changes nothing.
-- KEYS[1]  the shard's prefix (the shard of the schedule's id)
-- ARGV[1]  the schedule's id
-- ARGV[2]  its new revision
-- Writes: schedule_hash(id) (rev, last, revised_at: now, ms), schedules_set
-- Returns: {1, Redis's now in ms} when recorded, {0, the revision there} when that
--   is already as new, {-1, 0} when a reshard retired the shard (nothing written)
if retired() then return {-1, 0} end
local id, rev = ARGV[1], tonumber(ARGV[2])
local state = K.schedule_hash(id)
local stored = tonumber(redis.call('hget', state, 'rev') or '0')
if rev <= stored then return {0, stored} end
local clock = redis.call('time')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('hset', state, 'rev', rev, 'last', now_ms, 'revised_at', now_ms)
redis.call('sadd', K.schedules_set, id)
return {1, now_ms}
