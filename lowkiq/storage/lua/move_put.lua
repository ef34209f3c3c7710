-- move_put: merge jobs read by move_read from another queue into this shard,
-- as a dead job is queued up (SPEC §3 rule 4): perform_in = now,
-- retry_count = -1, payloads keep their scores, the job's error and group stay
-- (a job of that id queued here keeps its own group).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2]  the name of the queue the jobs come from (for the events)
-- ARGV[3..]  per job: id, blob, error ('' for none, else '+' then the error), group
--            ('' for the default one)
-- Writes: queue keys (payloads_zset(id) of ids that turn hot), wake_list
-- Returns: the number of jobs put, or -1 (and nothing written) when a reshard
--   retired the shard: the caller puts them again under the new layout
if retired() then return -1 end
local now = clock(ARGV[1])
local put = 0
for i = 3, #ARGV, 4 do
  local id, blob, error = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if error == '' then error = nil else error = string.sub(error, 2) end
  queue_merge(id, blob, now, -1, error, false, now, nil, ARGV[i + 3])
  put = put + 1
  if TRACK then track(K, 'enqueued', id, 'perform_in', now, 'from', ARGV[2]) end
end
return put
