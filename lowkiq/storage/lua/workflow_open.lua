-- workflow_open: open a workflow (lowkiq.workflows.store).
-- KEYS[1]  the workflow's prefix `lowkiq:{wf:<id>}:` (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  field, value pairs of its definition (callbacks, payload)
-- Writes: W state (status open, created_at, the definition); a complete workflow of
--   the same id is replaced (its members, shards and released held jobs forgotten)
-- Returns: when it opened (created_at); error `OPEN <status>` when a workflow of that id is open or closed and
--   not complete, `HELD <count>` when a complete one still holds jobs (nothing written)
local state = P .. 'state'
local status = redis.call('hget', state, 'status')
if status and status ~= 'complete' then return redis.error_reply('OPEN ' .. status) end
local held = redis.call('hlen', P .. 'held')
if held > 0 then return redis.error_reply('HELD ' .. held) end
-- (A workflow whose state expired left no other key: they expire with it.)
if status then redis.call('del', state, P .. 'ended', P .. 'states', P .. 'registered') end
local created_at = clock(ARGV[1])
redis.call('hset', state, 'status', 'open', 'created_at', created_at, unpack(ARGV, 2))
return created_at
