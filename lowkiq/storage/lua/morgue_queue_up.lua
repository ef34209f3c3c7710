-- morgue_queue_up: move dead jobs back to the queue with perform_in = now and
-- retry_count = -1, also when a job of that id is queued (SPEC §3 rule 4); the
-- dead job's error stays as the queued job's last error.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  ids (of this shard)
-- Writes: morgue keys, queue keys (a hot id's morgue_payloads_zset(id) becomes
--   its payloads_zset(id))
-- Returns: the number of jobs moved
if retired() then return 0 end  -- its jobs moved to the new shards
local now = clock(ARGV[1])
local moved = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local blob, error, group = morgue_remove(id)
  if blob then
    queue_merge(id, blob, now, -1, error, false, now, K.morgue_payloads_zset(id), group)
    if TRACK then track(K, 'enqueued', id, 'perform_in', now, 'from', 'morgue') end
    moved = moved + 1
  end
end
return moved
