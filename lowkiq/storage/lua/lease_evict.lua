-- lease_evict: free a shard's lease held by a process known to be dead (its
-- supervisor saw it exit), so its next owner takes the shard at once.  The next
-- acquisition gets a new epoch, so the dead holder's token stays refused.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  the dead process's id
-- Writes: lease, when held by that process (deleted)
-- Returns: 1 when a lease of that process was freed, else 0
local token = redis.call('get', K.lease)
if not token then return 0 end
local space = string.find(token, ' ', 1, true)
if not space or string.sub(token, space + 1) ~= ARGV[1] then return 0 end
redis.call('del', K.lease)
return 1
