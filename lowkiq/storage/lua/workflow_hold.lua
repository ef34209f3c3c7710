-- workflow_hold: keep a job back until the workflow succeeds (`after=`,
-- lowkiq.workflows.store); its relay pushes it then.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  the hold's name (unique)
-- ARGV[2]  the held job, packed (lowkiq.workflows.held)
-- Writes: W held (name -> job) and W state's `holds`, unless the workflow succeeded
--   already
-- Returns: 1 held, 0 not held: the workflow succeeded (push the job now); error
--   `UNKNOWN` when no such workflow exists
local f = redis.call('hmget', P .. 'state', 'status', 'succeeded')
if not f[1] then return redis.error_reply('UNKNOWN') end
if f[1] == 'complete' and f[2] == '1' then return 0 end
redis.call('hset', P .. 'held', ARGV[1], ARGV[2])
redis.call('hset', P .. 'state', 'holds', 1)
return 1
