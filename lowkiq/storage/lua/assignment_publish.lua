-- assignment_publish: the assigner publishes a new assignment, as changes to the
-- last one, and wakes the processes whose shards changed (and no other).
-- The changes are a diff against one generation: they are written only while that
-- generation is still the published one, and never over an assignment computed from a
-- newer membership version (an assigner that read an old snapshot, then was overtaken
-- by another run, writes nothing).
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  the assigner's process id (nothing is written unless M state names it)
-- ARGV[2]  the membership version the assignment was computed from
-- ARGV[3]  the assignment generation the changes were computed against
-- ARGV[4]  n: how many processes' shards changed, then n pairs: process id, its
--          shards (JSON {queue: [shard, ...]}, '' when it has none)
-- ARGV[..] m: how many shards changed owner, then m pairs: `queue:shard`, owner
--          ('' when nobody serves it now)
-- Writes: M assignment (process id -> shards), M owners (`queue:shard` -> process id),
--   M state (generation +1, assigned: the version), M nudge:<id> of each changed process
-- Returns: the new generation; 0 when this process is not the assigner, -1 when the
--   assignment is stale (the published generation is not ARGV[3], or it was computed
--   from a newer membership version than ARGV[2]); nothing is written then
local M = KEYS[1]
local s = redis.call('hmget', M .. 'state', 'assigner', 'generation', 'assigned')
if s[1] ~= ARGV[1] then return 0 end
if tonumber(s[2] or '0') ~= tonumber(ARGV[3])
    or tonumber(s[3] or '-1') > tonumber(ARGV[2]) then
  return -1
end
-- Set the fields of the `count` pairs from ARGV[at + 1] on in `hash` ('' deletes
-- one); returns the fields and the index after the pairs.
local function apply_pairs(hash, at)
  local count, fields = tonumber(ARGV[at]), {}
  for i = 1, count do
    local field, value = ARGV[at + 2 * i - 1], ARGV[at + 2 * i]
    if value == '' then
      redis.call('hdel', hash, field)
    else
      redis.call('hset', hash, field, value)
    end
    fields[i] = field
  end
  return fields, at + 2 * count + 1
end
local changed, next_at = apply_pairs(M .. 'assignment', 4)
for _, id in ipairs(changed) do nudge_process(M, id) end
apply_pairs(M .. 'owners', next_at)
redis.call('hset', M .. 'state', 'assigned', ARGV[2])
return redis.call('hincrby', M .. 'state', 'generation', 1)
