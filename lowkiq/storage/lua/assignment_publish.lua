-- assignment_publish: the assigner publishes a new assignment, as changes to the
-- last one, and wakes the processes whose shards changed (and no other).
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  the assigner's process id (nothing is written unless M state names it)
-- ARGV[2]  the membership version the assignment was computed from
-- ARGV[3]  n: how many processes' shards changed, then n pairs: process id, its
--          shards (JSON {queue: [shard, ...]}, '' when it has none)
-- ARGV[..] m: how many shards changed owner, then m pairs: `queue:shard`, owner
--          ('' when nobody serves it now)
-- Writes: M assignment (process id -> shards), M owners (`queue:shard` -> process id),
--   M state (generation +1, assigned: the version), M nudge:<id> of each changed process
-- Returns: the new generation, or 0 when this process is not the assigner
local M = KEYS[1]
if redis.call('hget', M .. 'state', 'assigner') ~= ARGV[1] then return 0 end
local assignment, owners = M .. 'assignment', M .. 'owners'
local at = 3
local n = tonumber(ARGV[at])
for i = 1, n do
  local id, shards = ARGV[at + 2 * i - 1], ARGV[at + 2 * i]
  if shards == '' then
    redis.call('hdel', assignment, id)
  else
    redis.call('hset', assignment, id, shards)
  end
  nudge_process(M, id)
end
at = at + 2 * n + 1
local m = tonumber(ARGV[at])
for i = 1, m do
  local key, owner = ARGV[at + 2 * i - 1], ARGV[at + 2 * i]
  if owner == '' then
    redis.call('hdel', owners, key)
  else
    redis.call('hset', owners, key, owner)
  end
end
redis.call('hset', M .. 'state', 'assigned', ARGV[2])
return redis.call('hincrby', M .. 'state', 'generation', 1)
