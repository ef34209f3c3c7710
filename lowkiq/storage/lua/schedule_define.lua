-- schedule_define: store what was changed at run time of one periodic job (lowkiq.periodic.control),
-- compare-and-set: the write happens only if the entry is still at the revision the
-- caller read, so two changes made at once never overwrite each other unseen.
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  the schedule's name (its job id)
-- ARGV[2]  the revision of its entry the caller read ('0': it had none)
-- ARGV[3]  the new entry (JSON: what changed; see lowkiq/periodic/overrides.py)
-- Writes: M schedules_version (+1: the new revision), M schedules (name -> `revision json`)
-- Returns: {1, the new revision} or {0, the entry's revision now} (changed meanwhile)
local M = KEYS[1]
local current = redis.call('hget', M .. 'schedules', ARGV[1])
local rev = 0
if current then rev = tonumber(string.match(current, '^(%d+)')) end
if rev ~= tonumber(ARGV[2]) then return {0, rev} end
local new = redis.call('incr', M .. 'schedules_version')
redis.call('hset', M .. 'schedules', ARGV[1], new .. ' ' .. ARGV[3])
return {1, new}
