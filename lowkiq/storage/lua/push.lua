-- push: enqueue jobs of one shard, merging onto queued jobs of the same id
-- (SPEC §3 rule 2).
-- KEYS[1]  the shard's prefix `lowkiq:{name:shard}:` (every key is derived from it)
-- ARGV[1]  now (unix seconds): '' for Redis's clock (a test may fix it); only
--          whether a job is due, to wake the shard's thread (perform_in is the caller's)
-- ARGV[2..]  groups of jobs sharing a perform_in: perform_in, count, then
--            `count` members `id \0 blob` (ids are unique within one call)
-- Writes: fresh_lex_zset, retry_lex_zset, payloads_zset(id) of hot ids,
--   perform_in_zset, wake_list
-- Returns: the number of jobs given, or -1 (and nothing written) when a
--   reshard retired the shard: the caller pushes them again under the new layout
if retired() then return -1 end
local now = clock(ARGV[1])
local CHUNK = 1000
local total = 0
local i = 2
while i <= #ARGV do
  local perform_in, count = ARGV[i], tonumber(ARGV[i + 1])
  local first = i + 2
  for chunk_start = first, first + count - 1, CHUNK do
    local chunk_end = math.min(chunk_start + CHUNK - 1, first + count - 1)
    local ids = {}
    for j = chunk_start, chunk_end do
      local member = ARGV[j]
      ids[#ids + 1] = string.sub(member, 1, string.find(member, '\0', 1, true) - 1)
    end
    local known = redis.call('zmscore', K.perform_in_zset, unpack(ids))
    local lex_args, schedule_args = {}, {}
    for n, id in ipairs(ids) do
      local member = ARGV[chunk_start + n - 1]
      if known[n] then
        queue_merge(id, blob_of(member, id), perform_in, -1, nil, true, now)
      else
        lex_args[#lex_args + 1] = 0
        lex_args[#lex_args + 1] = member
        schedule_args[#schedule_args + 1] = perform_in
        schedule_args[#schedule_args + 1] = id
      end
    end
    if #lex_args > 0 then
      wake_if_sooner(perform_in, now)
      redis.call('zadd', K.fresh_lex_zset, unpack(lex_args))
      redis.call('zadd', K.perform_in_zset, unpack(schedule_args))
    end
  end
  total = total + count
  i = first + count
end
return total
