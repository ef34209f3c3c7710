-- membership_command: leave a command (quiet, stop) for a live process and wake it.
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  process id
-- ARGV[2]  command
-- Writes: M process:<id> (command), M nudge:<id>
-- Returns: 1 when the process is live, 0 when it is unknown (nothing written)
local M = KEYS[1]
local id, command = ARGV[1], ARGV[2]
local process = M .. 'process:' .. id
if redis.call('exists', process) == 0 then return 0 end
redis.call('hset', process, 'command', command)
nudge_process(M, id)
return 1
