-- schedule_overrides: what was changed at run time of the periodic jobs, when it changed
-- since the caller last read it (every worker process's schedule thread asks at
-- least once a second: one small reply while nothing changed).
-- KEYS[1]  ownership prefix (M)
-- ARGV[1]  the version the caller read last ('' for none)
-- Reads: M schedules_version, M schedules
-- Returns: {version} when it is ARGV[1]; else {version, {name, `revision json`, ...}}
local M = KEYS[1]
local version = redis.call('get', M .. 'schedules_version') or '0'
if version == ARGV[1] then return {version} end
return {version, redis.call('hgetall', M .. 'schedules')}
