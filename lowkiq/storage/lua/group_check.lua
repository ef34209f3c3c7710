-- group_check: whether jobs may be pushed with their groups (read only; push
-- checks again, and refuses its shard's part, when a group changed meanwhile).
-- KEYS[1]  the shard's prefix
-- ARGV     sections: group (never ''), count, then `count` ids (of this shard); or,
--          to ask first whether the ids are needed, sections of count 0
-- Returns: {} when each id is not queued or queued in that group, else the first
--   other: {id, its queued group ('': the default one)}; {'?'} when asked without
--   the ids and they are needed.
-- A shard not indexed whose base group is every section's, or that holds no queued
-- id, needs no id looked up: its queued ids are all of that group.
local same = not grouped()
if same and redis.call('exists', K.perform_in_zset) == 1 then
  local i = 1
  while same and i <= #ARGV do
    same = ARGV[i] == base_group()
    i = i + 2 + tonumber(ARGV[i + 1])
  end
end
if same then return {} end
if ARGV[2] == '0' then return {'?'} end
local i = 1
while i <= #ARGV do
  local group, last = ARGV[i], i + 1 + tonumber(ARGV[i + 1])
  for first = i + 2, last, 1000 do
    local ids = {unpack(ARGV, first, math.min(first + 999, last))}
    local known = redis.call('zmscore', K.perform_in_zset, unpack(ids))
    for n, id in ipairs(ids) do
      if known[n] then
        local queued = groups().group_of(id)
        if queued ~= group then return {id, queued} end
      end
    end
  end
  i = last + 1
end
return {}
