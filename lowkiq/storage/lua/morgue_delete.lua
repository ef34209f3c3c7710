-- morgue_delete: delete dead jobs.
-- KEYS[1]  the shard's prefix
-- ARGV     ids (of this shard)
-- Writes: morgue_lex_zset, morgue_updated_at_zset, morgue_errors_hash,
--   morgue_payloads_zset(id) of hot ids
-- Returns: the number of jobs deleted
if retired() then return 0 end  -- its jobs moved to the new shards
local deleted = 0
for i = 1, #ARGV do
  if delete_dead(ARGV[i]) then
    deleted = deleted + 1
    if TRACK then track(K, 'deleted', ARGV[i], 'from', 'morgue') end
  end
end
return deleted
