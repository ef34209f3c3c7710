-- schedule_tick: claim a periodic job's due ticks and enqueue their jobs in one
-- step (lowkiq.periodic), on Redis's clock, in the shard of the job's id: a
-- tick is passed once (`last` only grows, compare-and-set), and its job is
-- written by the same script, so no crash or pause can split the two.
-- KEYS[1]  the shard's prefix (the shard of the schedule's id)
-- ARGV[1]  the schedule's id, also the id of its jobs
-- ARGV[2]  the `last` tick (ms) the caller saw; '' when it saw none
-- ARGV[3]  the new `last` tick (ms): every tick up to it is passed; it must be
--          due on Redis's clock.  '' to run the job now, ticks untouched
-- ARGV[4]  seed: `last rev` of the shard a reshard retired ('' none); taken when
--          this shard has no `last` yet
-- ARGV[5]  who asks (`host:pid`, or `dashboard`), for the log
-- ARGV[6]  the revision of the definition the caller follows (0: settings.schedules
--          unchanged at run time; see schedule_revise): an older one than the
--          shard's passes nothing; a newer one is recorded, `last` = now, nothing passed
-- ARGV[7..]  the jobs to enqueue, in pairs: score (the tick, unix seconds),
--            payload (serialized); merged onto a queued job of the id (SPEC §3)
-- Writes: schedule_hash(id) (last, enqueued, enqueued_at, runs, run_now_at, rev, revised_at),
--   schedules_set,
--   schedule_log_list(id) (`tick enqueued_at kind by`), the queue keys of push
-- Returns: {status, Redis's now in ms, `last` after the call or false};
--   status 1: done; 0: `last` is not the one the caller saw (another process
--   passed the ticks), or not before the new one, or the caller's revision is newer
--   (recorded, `last` = now); 2: the new `last` is not due yet; 3: the caller's
--   revision is older than the shard's (nothing written); -1: a reshard retired
--   the shard (nothing written)
if retired() then return {-1, 0, false} end
local id, expected, new_last, seed, by = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local clock = redis.call('time')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now = clock[1] .. '.' .. string.format('%06d', tonumber(clock[2]))
local state = K.schedule_hash(id)
local last = redis.call('hget', state, 'last')
local fresh = not last
local seed_last, seed_rev = string.match(seed, '^(%d+) ?(%d*)$')
if fresh and seed_last then last = seed_last end
local LOG_SIZE = 100

local function enqueue(score, payload, tick, kind)
  local blob = struct.pack(HEADER, tonumber(score), #payload) .. payload
  if redis.call('zscore', K.perform_in_zset, id) then
    queue_merge(id, blob, score, -1, nil, true, now)
  else
    write_queued(id, blob, score, -1, nil, now)
  end
  if TRACK then track(K, 'enqueued', id, 'perform_in', score, 'from', 'schedule') end
  redis.call('lpush', K.schedule_log_list(id), tick .. ' ' .. now_ms .. ' ' .. kind .. ' ' .. by)
end

if new_last == '' then
  enqueue(ARGV[7], ARGV[8], now_ms, 'now')
  redis.call('ltrim', K.schedule_log_list(id), 0, LOG_SIZE - 1)
  redis.call('hset', state, 'run_now_at', now_ms)
  return {1, now_ms, last or false}
end
local rev = tonumber(ARGV[6])
local stored_rev = redis.call('hget', state, 'rev')
if not stored_rev and fresh and seed_rev and seed_rev ~= '' then stored_rev = seed_rev end
stored_rev = tonumber(stored_rev or '0')
if rev < stored_rev then return {3, now_ms, last or false} end
if rev > stored_rev then
  redis.call('hset', state, 'rev', rev, 'last', now_ms, 'revised_at', now_ms)
  if fresh then redis.call('sadd', K.schedules_set, id) end
  return {0, now_ms, now_ms}
end
if (last or '') ~= expected then return {0, now_ms, last or false} end
if last and tonumber(new_last) <= tonumber(last) then return {0, now_ms, last} end
if tonumber(new_last) > now_ms then return {2, now_ms, last or false} end
local runs = 0
for i = 7, #ARGV, 2 do
  local tick = string.format('%d', math.floor(tonumber(ARGV[i]) * 1000 + 0.5))
  enqueue(ARGV[i], ARGV[i + 1], tick, 'tick')
  redis.call('hset', state, 'enqueued', tick)
  runs = runs + 1
end
if runs > 0 then
  redis.call('ltrim', K.schedule_log_list(id), 0, LOG_SIZE - 1)
  redis.call('hset', state, 'enqueued_at', now_ms)
  redis.call('hincrby', state, 'runs', runs)
end
redis.call('hset', state, 'last', new_last)
if fresh then redis.call('sadd', K.schedules_set, id) end
return {1, now_ms, new_last}
