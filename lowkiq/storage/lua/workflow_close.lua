-- workflow_close: the workflow's context ended: it has all of its members
-- (lowkiq.workflows.store); complete at once when every one ended already.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  total: how many members it has ('': those ended or failed so far, a close
--          of a workflow whose block never ended)
-- ARGV[3]  the shards its members live in, each `queue \0 shard`, joined by `\0`
-- ARGV[4]  its members, each `queue \0 id \0 digest \0`, as one string
-- Writes: W registered (the members appended), W state (status closed, or complete;
--   total, closed_at, shards)
-- Returns: 1 when it is complete now, else 0; error `CLOSED <status>` when not open
local f = redis.call('hmget', P .. 'state', unpack(WF_COUNTS))
if f[1] ~= 'open' then return redis.error_reply('CLOSED ' .. tostring(f[1])) end
if ARGV[4] ~= '' then redis.call('append', P .. 'registered', ARGV[4]) end
local total = ARGV[2] ~= '' and ARGV[2] or redis.call('scard', P .. 'ended')
  + tonumber(redis.call('hget', P .. 'state', 'failed') or '0')
local fields = {'status', 'closed', 'closed_at', clock(ARGV[1]), 'total', total}
if ARGV[3] ~= '' then
  fields[#fields + 1] = 'shards'
  fields[#fields + 1] = ARGV[3]
end
-- (Complete at once: wf_complete adds status complete to these fields; the later wins.)
f[1], f[2] = 'closed', total
return wf_complete(ARGV[1], P, f, fields)
