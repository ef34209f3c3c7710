-- fail: the shard's batch raised; each of its jobs ends as its fate says
-- (SPEC §4, §11 Job control), all in this one script:
--   retry    retry_count + 1 and queued again for a retry (rule 3 of §3), or,
--            at max_retry_count, its oldest payload to the morgue and the rest
--            queued again as fresh
--   kill     to the morgue at once, whole (lowkiq.Kill)
--   discard  dropped without a retry, counted as discarded (lowkiq.Discard)
--   snooze   queued again, due its seconds from now, its retry_count and error
--            unchanged, counted as snoozed (lowkiq.Snooze)
--   done     acked, counted as processed (a job lowkiq.BatchFailed did not name)
-- The other jobs of the processing area (batches popped with it, performed or
-- not yet) stay there.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  the batch: the number its pop returned
-- ARGV[3]  now: '' for Redis's clock (a test may fix it)
-- ARGV[4]  max_retry_count
-- ARGV[5]  n: how many error texts follow
-- ARGV[6..5+n]  the error texts (already serialized), each sent once
-- then per job, 4 arguments: id, fate, index of its error among the texts
--   (1-based; 0: none), seconds until its retry (retry_in(retry_count + 1);
--   the retry's perform_in is now + that, on Redis's clock) or, snoozed, until
--   it is due again
-- Writes: processing_hash (the batch's jobs leave it), restores_hash, queue
--   keys, morgue keys (with the per-id payload sets of hot ids),
--   failed_counter (retry, kill), processed_counter (done), discarded_counter,
--   snoozed_counter, wf_outbox_hash (workflow members: see wf_note)
-- Returns: flat list id, blob of the payloads each job sent to the morgue;
--   error FENCED when the lease is not held, error STALE when the area holds
--   another batch (nothing is changed)
local token, now = ARGV[1], clock(ARGV[3])
local max_retry_count = tonumber(ARGV[4])
local held, in_area = lease_and_batch(K, token, ARGV[2])
if not held then return fenced() end
if not in_area then return stale_batch(ARGV[2]) end
local processing = K.processing_hash
local errors = {}
for i = 1, tonumber(ARGV[5]) do errors[i] = ARGV[5 + i] end
local first_job = 6 + #errors
local ids = {}
for i = first_job, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
forget_restores(K, ids)
local dead = {}
local counts = {retry = 0, kill = 0, discard = 0, done = 0, snooze = 0}
for i = first_job, #ARGV, 4 do
  local id, fate, error = ARGV[i], ARGV[i + 1], errors[tonumber(ARGV[i + 2])]
  local value = redis.call('hget', processing, id)
  if value then
    counts[fate] = counts[fate] + 1
    redis.call('hdel', processing, id)
    local _, retry_count, stored_error, blob, group = processing_unpack(value)
    if fate == 'snooze' then
      local due_at = tonumber(now) + tonumber(ARGV[i + 3])
      queue_merge(id, blob, due_at, retry_count, stored_error, false, now, nil, group)
      if TRACK then
        track(K, 'snoozed', id, 'fence', token, 'perform_in', string.format('%.6f', due_at))
      end
    elseif fate == 'kill' then
      morgue_merge(id, blob, error, now, nil, group)
      wf_note(id, blob, 'x')
      if TRACK then track(K, 'buried', id, 'fence', token, 'error', error_summary(error)) end
      dead[#dead + 1] = id
      dead[#dead + 1] = blob
    elseif fate == 'retry' then
      retry_count = retry_count + 1
      if retry_count >= max_retry_count then
        local first, rest = blob_split_first(blob)
        morgue_merge(id, first, error, now, nil, group)
        wf_note(id, first, 'x')
        wf_note(id, rest, 'f')
        if TRACK then track(K, 'buried', id, 'fence', token, 'error', error_summary(error)) end
        dead[#dead + 1] = id
        dead[#dead + 1] = first
        if rest ~= '' then queue_merge(id, rest, now, -1, nil, false, now, nil, group) end
      else
        local retry_at = tonumber(now) + tonumber(ARGV[i + 3])
        queue_merge(id, blob, retry_at, retry_count, error, false, now, nil, group)
        wf_note(id, blob, 'f')
        if TRACK then
          track(K, 'failed', id, 'fence', token, 'retry_count', retry_count,
            'perform_in', string.format('%.6f', retry_at), 'error', error_summary(error))
        end
      end
    else
      wf_note(id, blob, fate == 'discard' and 'c' or 'd')
      if TRACK then track(K, fate == 'discard' and 'discarded' or 'done', id, 'fence', token) end
    end
  end
end
local failed = counts.retry + counts.kill
if failed > 0 then redis.call('incrby', K.failed_counter, failed) end
if counts.done > 0 then redis.call('incrby', K.processed_counter, counts.done) end
if counts.discard > 0 then redis.call('incrby', K.discarded_counter, counts.discard) end
if counts.snooze > 0 then redis.call('incrby', K.snoozed_counter, counts.snooze) end
return dead
