-- workflow_members: add members to an open workflow (lowkiq.workflows.store), before
-- it closes; a member told settled already keeps its state.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  n: how many shards follow (`queue \0 shard`, where members live)
-- ARGV[2..1+n]  the shards; then the members (`queue \0 id \0 sha1 of the stored payload`)
-- Writes: W members (member -> 'p' pending), W shards
-- Returns: the members added; error `CLOSED <status>` when it is not open
local status = redis.call('hget', P .. 'state', 'status')
if status ~= 'open' then return redis.error_reply('CLOSED ' .. tostring(status)) end
local n = tonumber(ARGV[1])
for i = 2, 1 + n do redis.call('sadd', P .. 'shards', ARGV[i]) end
local members, fields = P .. 'members', {}
-- Read at once, written at once (a member told settled already keeps its state).
for first = 2 + n, #ARGV, 2000 do
  local last = math.min(first + 1999, #ARGV)
  local known = redis.call('hmget', members, unpack(ARGV, first, last))
  for j = 1, #known do
    if not known[j] then
      fields[#fields + 1] = ARGV[first + j - 1]
      fields[#fields + 1] = 'p'
    end
  end
end
add_many('hset', members, fields)
return #fields / 2
