-- morgue_delete: delete dead jobs.
-- KEYS[1]  queue prefix
-- ARGV     ids
-- Writes: morgue_lex_zset, morgue_updated_at_zset, morgue_errors_hash
-- Returns: the number of jobs deleted
local deleted = 0
for i = 1, #ARGV do
  if morgue_remove(ARGV[i]) then deleted = deleted + 1 end
end
return deleted
