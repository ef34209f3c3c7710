-- workflow_close: the workflow's context ended: it has all of its members
-- (lowkiq.workflows.store); complete at once when every one ended already.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  total: how many members it has ('': those ended or failed so far, a close
--          of a workflow whose block never ended)
-- ARGV[3]  the shards its members live in, each `queue \0 shard`, joined by `\0`
-- ARGV[4]  its members, each `queue \0 id \0 digest \0`, as one string
-- ARGV[5]  ms a complete workflow's keys are kept (settings.workflow_ttl)
-- Writes: W registered (the members appended), W state (status closed, or complete;
--   total, closed_at, shards); when complete, its keys' expiry
-- Returns: 1 when it is complete now, else 0; error `CLOSED <status>` when not open
local f = redis.call('hmget', P .. 'state', 'status', 'total', 'done', 'dead', 'discarded',
  'cancelled', 'instance', 'failed')  -- WF_COUNTS, then two more
local instance, failed = f[7], tonumber(f[8] or '0')
if f[1] ~= 'open' then return redis.error_reply('CLOSED ' .. tostring(f[1])) end
if ARGV[4] ~= '' then redis.call('append', P .. 'registered', ARGV[4]) end
-- Done: the members ended, but dead or discarded (see workflow_settle.lua).
local ended = P .. 'ended:' .. instance
local ended_count = redis.call('scard', ended)
local dead, discarded = tonumber(f[4] or '0'), tonumber(f[5] or '0')
local done = ended_count - dead - discarded
local total = ARGV[2] ~= '' and ARGV[2] or ended_count + failed
local fields = {'status', 'closed', 'closed_at', clock(ARGV[1]), 'total', total}
if done ~= tonumber(f[3] or '0') then  -- (a relay added members, then died)
  fields[#fields + 1] = 'done'
  fields[#fields + 1] = done
end
if ARGV[3] ~= '' then
  fields[#fields + 1] = 'shards'
  fields[#fields + 1] = ARGV[3]
end
if failed > 0 and ended_count >= tonumber(total) then
  fields[#fields + 1] = 'failed'
  fields[#fields + 1] = wf_unfail(ended, P .. 'states', failed)
end
-- (Complete at once: wf_complete adds status complete to these fields; the later wins.)
f[1], f[2], f[3] = 'closed', total, done
return wf_complete(ARGV[1], ARGV[5], P, instance, f, fields)
