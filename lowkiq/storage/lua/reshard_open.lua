-- reshard_open: every old shard that could hold jobs of this new shard is
-- emptied: let the shard be popped, and wake the thread serving it.
-- KEYS[1]  the shard's prefix
-- Writes: hold, wake_list
-- Returns: 1 when the shard was closed, else 0
local closed = redis.call('get', K.hold) == 'closed'
if closed then redis.call('del', K.hold) end
wake()
return closed and 1 or 0
