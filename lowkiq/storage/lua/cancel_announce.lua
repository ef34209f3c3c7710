-- cancel_announce: tell every process which running batches Worker.actions().cancel
-- cancelled: one entry per batch in the cancels stream (queue, shard, batch number,
-- ids joined by NUL), then bump the config version and wake every live process
-- (as membership_nudge does), so each reads the new entries at its next beat, now,
-- and flags the batches it performs.  Entries older than ARGV[2] ms are trimmed, and
-- the stream expires that long after the last cancel: a cancel costs nothing once
-- every process has read it, and nothing is kept while none is made.
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  the queue's name
-- ARGV[2]  how long entries are kept (ms)
-- ARGV[3..]  per running batch: shard, batch number, its cancelled ids joined by NUL
-- Writes: M cancels (stream), M state (config +1), M nudge:<process> of each live one
-- Returns: how many processes were nudged
local M = KEYS[1]
local stream = M .. 'cancels'
local keep = tonumber(ARGV[2])
local time = redis.call('time')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
for i = 3, #ARGV, 3 do
  redis.call('xadd', stream, 'minid', '~', tostring(now_ms - keep), '*',
    'queue', ARGV[1], 'shard', ARGV[i], 'batch', ARGV[i + 1], 'ids', ARGV[i + 2])
end
redis.call('pexpire', stream, keep)
redis.call('hincrby', M .. 'state', 'config', 1)
local count = 0
for _, other in ipairs(redis.call('zrange', M .. 'processes', 0, -1)) do
  nudge_process(M, other)
  count = count + 1
end
return count
