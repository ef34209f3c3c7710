-- workflow_open: open a workflow (lowkiq.workflows.store).
-- KEYS[1]  the workflow's prefix `lowkiq:{wf:<id>}:` (W)
-- KEYS[2..]  on one server, the indexes its id joins (on a Redis Cluster, in a slot of
--            their own, the caller adds it)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  the mark each index keeps (lowkiq.workflows.store's BULK_MARK)
-- ARGV[3..]  field, value pairs of its definition (callbacks, payload)
-- Writes: W state (status open, created_at, the definition), the indexes; a complete workflow of
--   the same id is replaced (its members, shards and released held jobs forgotten)
-- Returns: when it opened (created_at); error `OPEN <status>` when a workflow of that id is open or closed and
--   not complete, `HELD <count>` when a complete one still holds jobs (nothing written)
local state = P .. 'state'
local old = redis.call('hmget', state, 'status', 'instance')
local status = old[1]
if status and status ~= 'complete' then return redis.error_reply('OPEN ' .. status) end
local held = redis.call('hlen', P .. 'held')
if held > 0 then return redis.error_reply('HELD ' .. held) end
-- (A workflow whose state expired left no other key: they expire with it.)
if status then
  redis.call('del', state, P .. 'ended:' .. (old[2] or ''), P .. 'states', P .. 'registered')
end
local created_at = clock(ARGV[1])
redis.call('hset', state, 'status', 'open', 'created_at', created_at, unpack(ARGV, 3))
-- Each index keeps the mark, a member too long for a packed sorted set, at score 0:
-- Redis keeps it a skiplist (a small one packed is scanned on every add).
local id = string.match(P, '{wf:(.*)}:$')
for k = 2, #KEYS do
  redis.call('zadd', KEYS[k], '0', ARGV[2], created_at, id)
end
return created_at
