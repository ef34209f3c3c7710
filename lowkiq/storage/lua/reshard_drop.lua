-- reshard_drop: remove from a retired shard the jobs reshard_put merged into
-- the new shards, and their ids from the moving ones (actions now find them in
-- their new shards).
-- KEYS[1]  the old shard's prefix
-- ARGV     pairs of kind ('q' queued, 'm' dead) and id
-- Writes: queue keys, morgue keys (with hot ids' payload sorted sets), moving_set
-- Returns: the number of jobs removed
if not retired() then return redis.error_reply('NOTRETIRED ' .. P .. ': the shard is not retired') end
local removed = 0
for i = 1, #ARGV, 2 do
  local kind, id = ARGV[i], ARGV[i + 1]
  if kind == 'q' then
    local member, is_retry = find_queued(id)
    if member then
      delete_queued(id, member, is_retry)
      removed = removed + 1
    end
  elseif delete_dead(id) then
    removed = removed + 1
  end
  redis.call('srem', K.moving_set, id)
end
return removed
