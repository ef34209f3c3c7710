-- lease_release: give up leases (a process stopping, or a shard moving away),
-- so another process can take the shards at once instead of after the TTL.
-- KEYS[1]  queue prefix
-- ARGV[1+2i..2+2i]  shard, lease token
-- Writes: lease(shard) of each still held by that token (deleted)
-- Returns: how many leases were released
local released = 0
for i = 1, #ARGV, 2 do
  if lease_held(ARGV[i], ARGV[i + 1]) then
    redis.call('del', K.lease(ARGV[i]))
    released = released + 1
  end
end
return released
