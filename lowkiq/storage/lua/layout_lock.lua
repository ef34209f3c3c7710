-- layout_lock: take or keep the lock of the one command resharding a queue.
-- KEYS[1]  the lock key
-- ARGV[1]  owner, ARGV[2] ttl in ms; ARGV[3] '1' to give the lock up instead
-- Returns: 1 when `owner` holds (or gave up) the lock, 0 when another does
local holder = redis.call('get', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
if ARGV[3] == '1' then
  redis.call('del', KEYS[1])
else
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return 1
