-- reshard_open: every old shard that could hold jobs of this new shard is
-- emptied: let the shard be popped, and wake the thread serving it.
-- Fences grow with time (lowkiq/ownership/leases.py: fence_of): the jobs that
-- move here ran in the old shards under epochs up to ARGV[1], so no job may run
-- here under a lower one.  The epoch counter is raised to it, and a lease taken
-- under an epoch not above it (its holder took this closed shard before an old
-- shard changed hands) is revoked: its holder takes the shard again, under a
-- higher epoch.  Nothing runs under that lease yet (the shard was closed).
-- KEYS[1]  the shard's prefix
-- ARGV[1]  the highest epoch counter of those old shards ('' or '0': none)
-- Once open, a call changes nothing but waking the shard.
-- Writes: hold, wake_list, epoch_counter, lease
-- Returns: {1 when the shard was closed else 0, 1 when a lease was revoked else 0}
local closed = redis.call('get', K.hold) == 'closed'
local revoked = 0
local floor = tonumber(ARGV[1]) or 0
if closed then redis.call('del', K.hold) end
-- Only when opening: once open, the shard's own owners' epochs are all that count.
if closed and floor > 0 then
  local last = tonumber(redis.call('get', K.epoch_counter) or '0')
  if last < floor then redis.call('set', K.epoch_counter, string.format('%d', floor)) end
  local current = redis.call('get', K.lease)
  if current then
    local epoch = tonumber(string.match(current, '^(%d+) '))
    if epoch and epoch <= floor then
      redis.call('del', K.lease)
      revoked = 1
    end
  end
end
wake()
return {closed and 1 or 0, revoked}
