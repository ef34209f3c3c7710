-- workflow_members: add members to an open workflow (lowkiq.workflows.store), before
-- it closes; a member told settled already keeps its state.
-- KEYS[1]  the workflow's prefix (W)
-- ARGV[1]  n: how many shards follow (`queue \0 shard`, where members live)
-- ARGV[2..1+n]  the shards; then the members (`queue \0 id \0 sha1 of the stored payload`)
-- Writes: W members (member -> 'p' pending), W shards
-- Returns: the members added; error `CLOSED <status>` when it is not open
local status = redis.call('hget', P .. 'state', 'status')
if status ~= 'open' then return redis.error_reply('CLOSED ' .. tostring(status)) end
return wf_register(ARGV, 1)
