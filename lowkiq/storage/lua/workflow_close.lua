-- workflow_close: the workflow's context ended: it has all of its members
-- (lowkiq.workflows.store); complete at once when every one ended already.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  optional: its last members, as lua/workflow_members.lua takes them (n,
--            n shards, the members), registered first
-- Writes: W state (status closed, or complete; total = its members, closed_at)
-- Returns: 1 when it is complete now, else 0; error `CLOSED <status>` when not open
local state = P .. 'state'
local status = redis.call('hget', state, 'status')
if status ~= 'open' then return redis.error_reply('CLOSED ' .. tostring(status)) end
if #ARGV > 1 then wf_register(ARGV, 2) end
local total = redis.call('hlen', P .. 'members')
redis.call('hset', state, 'status', 'closed', 'closed_at', clock(ARGV[1]), 'total', total)
return wf_complete(ARGV[1], P)
