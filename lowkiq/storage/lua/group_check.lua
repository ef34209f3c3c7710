-- group_check: whether jobs may be pushed with their groups (read only; push
-- checks again, and refuses its shard's part, when a group changed meanwhile).
-- KEYS[1]  the shard's prefix
-- ARGV     pairs id, group (of this shard; a group is never '')
-- Returns: {} when each id is not queued or queued in that group, else the first
--   other: {id, its queued group ('': the default one)}
local ids = {}
for i = 1, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local known = redis.call('zmscore', K.perform_in_zset, unpack(ids))
for n, id in ipairs(ids) do
  if known[n] then
    local queued = grouped() and groups().group_of(id) or ''
    if queued ~= ARGV[2 * n] then return {id, queued} end
  end
end
return {}
