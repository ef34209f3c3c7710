-- reshard_put: merge jobs read by reshard_take from an old shard into this new
-- shard.  A queued job's perform_in, retry_count and error win over those of a
-- job of the same id pushed here meanwhile (it was queued first: SPEC §3 rule
-- 2); payloads merge as a union.  Merging the same record twice changes
-- nothing, so a reshard interrupted between put and drop can run again.
-- KEYS[1]  the new shard's prefix
-- ARGV[1]  now: '' for Redis's clock (a test may fix it)
-- ARGV[2..]  records of 8 fields, as reshard_take returns them
-- Writes: queue keys, morgue keys
-- Returns: the number of records merged
local now = clock(ARGV[1])
local count = 0
for i = 2, #ARGV, 8 do
  local kind, id, at = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local error = nil
  if ARGV[i + 4] == '1' then error = ARGV[i + 5] end
  local blob, group = ARGV[i + 6], ARGV[i + 7]
  if kind == 'q' then
    queue_merge(id, blob, at, tonumber(ARGV[i + 3]), error, false, now, nil, group)
  else
    morgue_merge(id, blob, error, at, nil, group)
  end
  count = count + 1
end
return count
