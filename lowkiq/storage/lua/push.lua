-- push: enqueue jobs, merging onto queued jobs of the same id (SPEC §3 rule 2).
-- KEYS[1]  queue prefix `lowkiq:{name}:` (every key is derived from it)
-- ARGV[1]  now (unix seconds)
-- ARGV[2+4i..5+4i]  id, shard, perform_in, blob  -- one job each
-- Writes: fresh_lex_zset, retry_lex_zset, perform_in_zset(shard), wake_list(shard)
-- Returns: the number of jobs given
local now = ARGV[1]
local count = 0
for i = 2, #ARGV, 4 do
  queue_merge(ARGV[i], ARGV[i + 1], ARGV[i + 3], ARGV[i + 2], -1, nil, true, now)
  count = count + 1
end
return count
