-- superseded: whether a payload of the id was enqueued after the running batch `batch`
-- popped it (current_batch().superseded).  A pop takes the whole job of an id, so
-- whatever is queued for it now came later; but a hot id may stay queued with payloads
-- the batch left behind (pop.lua records how many in hot_left_hash): it is superseded
-- only when more are queued now.  Reads only.
-- KEYS[1]  the shard's prefix
-- ARGV[1]  the id
-- ARGV[2]  the batch: the number its pop returned
-- Returns: 1 superseded, 0 not
local id = ARGV[1]
local member = find_queued(id)
if not member then return 0 end
if blob_of(member, id) ~= '' then return 1 end
local left = redis.call('hget', K.hot_left_hash, id)
if not left then return 1 end
local space = string.find(left, ' ', 1, true)
if string.sub(left, 1, space - 1) ~= ARGV[2] then return 1 end
local count = redis.call('zcard', K.payloads_zset(id))
if count > tonumber(string.sub(left, space + 1)) then return 1 end
return 0
