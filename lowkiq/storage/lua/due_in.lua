-- due_in: how long until the earliest job of a shard is due, on Redis's clock
-- (an idle thread waits that long, whatever its host's clock says).
-- KEYS[1]  the shard's prefix
-- Reads: perform_in_zset
-- Returns: seconds as a string (negative when a job is due already), or nil
--   when the shard holds no job
local head = redis.call('zrange', K.perform_in_zset, 0, 0, 'withscores')[2]
if not head then return false end
return string.format('%.17g', tonumber(head) - tonumber(clock()))
