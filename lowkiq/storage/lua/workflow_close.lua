-- workflow_close: the workflow's context ended: it has all of its members
-- (lowkiq.workflows.store); complete at once when every one ended already.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  total: how many members it has ('': those ended or failed so far, a close
--          of a workflow whose block never ended)
-- ARGV[3..]  n, n shards (`queue \0 shard`, where members live), then the members as one
--            string (see wf_register)
-- Writes: W registered, W shards, W state (status closed, or complete; total, closed_at)
-- Returns: 1 when it is complete now, else 0; error `CLOSED <status>` when not open
local f = redis.call('hmget', P .. 'state', unpack(WF_COUNTS))
if f[1] ~= 'open' then return redis.error_reply('CLOSED ' .. tostring(f[1])) end
wf_register(ARGV, 3)
local total = ARGV[2] ~= '' and ARGV[2] or redis.call('hlen', P .. 'members')
f[1], f[2] = 'closed', total
return wf_complete(ARGV[1], P, f, {'status', 'closed', 'closed_at', clock(ARGV[1]), 'total', total})
