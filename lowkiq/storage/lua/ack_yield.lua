-- ack_yield: the shard's batch succeeded, but some of its ids yielded: the
-- payloads they did not get to go back to the queue, due now, behind the ids
-- already due, with their scores (merged with anything queued for them since,
-- SPEC §3); then the rest of the processing area is acked.  A yield is neither
-- a failure nor a death: the retry count and error stay as they were, no
-- restore is counted; each yield of an id is counted (`\0` .. id in
-- restores_hash, forgotten when the id ends).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  lease token of the shard
-- ARGV[2]  the batch: the number its pop returned
-- ARGV[3]  now: '' for Redis's clock (a test may fix it)
-- ARGV[4..]  per yielded id: id, count, then `count` positions (1-based) of the
--            payloads it gives back, in the order of its popped payloads
-- Writes: processing_hash, queue keys, restores_hash, processed_counter, wf_outbox_hash
--   (the workflow members performed are noted done; those given back stay pending)
-- Returns: {jobs acked, jobs yielded}; error FENCED when the lease is not held, error
--   STALE when the area holds another batch (nothing is changed)
local held, in_area = lease_and_batch(K, ARGV[1], ARGV[2])
if not held then return fenced() end
if not in_area then return stale_batch(ARGV[2]) end
local now = clock(ARGV[3])
local processing = K.processing_hash
local yielded = 0
local i = 4
while i <= #ARGV do
  local id, count = ARGV[i], tonumber(ARGV[i + 1])
  local value = redis.call('hget', processing, id)
  if value then
    local _, retry_count, error, blob, group = processing_unpack(value)
    local popped = blob_pairs(blob)
    local rest = {}
    for j = i + 2, i + 1 + count do
      rest[#rest + 1] = popped[tonumber(ARGV[j])]
    end
    local back = {}
    for _, pair in ipairs(rest) do back[pair] = true end
    local performed = {}
    for _, pair in ipairs(popped) do
      if not back[pair] then performed[#performed + 1] = pair end
    end
    wf_note(id, blob_pack(performed), 'd')
    redis.call('hdel', processing, id)
    if #rest > 0 then
      queue_merge(id, blob_pack(rest), now, retry_count, error, false, now, nil, group)
      redis.call('hincrby', K.restores_hash, '\0' .. id, 1)
      yielded = yielded + 1
      if TRACK then track(K, 'yielded', id, 'fence', ARGV[1], 'left', #rest) end
    elseif TRACK then
      track(K, 'done', id, 'fence', ARGV[1])
    end
  end
  i = i + 2 + count
end
wf_note_area(redis.call('hgetall', processing), 'd')
return {ack_processing(K, nil, ARGV[1]), yielded}
