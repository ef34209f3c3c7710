-- push: enqueue jobs of one shard, merging onto queued jobs of the same id
-- (SPEC §3 rule 2, or Worker.merge_perform_in).
-- KEYS[1]  the shard's prefix `lowkiq:{name:shard}:` (every key is derived from it)
-- ARGV[1]  now (unix seconds): '' for Redis's clock (a test may fix it); the
--          perform_in and score of jobs given none, and whether a job is due (to
--          wake the shard's thread)
-- ARGV[2]  the perform_in of a job enqueued onto a queued one: 'keep' the queued
--          one's, the 'latest' (the new one's), or the later of the two ('max');
--          optionally followed by NUL, seconds, NUL, a name: a push made once (a
--          workflow's callback or released job): when once_flag(name) exists, nothing
--          is written (returns 0), else it is set for that many seconds (and a tracked
--          worker's enqueued event carries the name: 'once')
-- ARGV[3..]  sections of jobs sharing a perform_in and a group: perform_in ('' for
--            now, '+s' for s seconds from now), group ('' for none), form, count, then
--            the `count` ids (unique within one call), then their `count` bodies, as
--            the form says (lowkiq.storage.push_plan):
--              'n'  each job one payload given no score: the payload's length (>I4)
--                   then the payload; its member is `id \0` now, length, payload
--              's'  the job's member `id \0 blob`, every score given
--              'm'  the job's member `id \0 blob`, whose payloads given no score carry
--                   SCORE_NOW, first in the blob, in the order given
-- Writes: fresh_lex_zset, retry_lex_zset, payloads_zset(id) of hot ids,
--   perform_in_zset, due_since_zset (merge_perform_in other than 'keep'), wake_list,
--   the group keys (see _common.lua)
-- Returns: the number of jobs given, or -1 (and nothing written) when a
--   reshard retired the shard: the caller pushes them again under the new layout;
--   an error `GROUP <length of the id> <id><its queued group>` (and nothing written)
--   when a job names a group other than the one of its queued id (a job naming none
--   joins the queued id's group)
-- Most shards are neither held by a reshard nor hold groups: one EXISTS says so (an
-- error, under ASKING on a slot being imported, asks again key by key).
-- early {
-- Most pushes are perform_async's one job given no score, perform_in or group, into such
-- a shard: its id scheduled now (ZADD NX), and when it was not queued, its member and
-- the wake-up, as below, and nothing else to decide.  (By EVALSHA these lines run before
-- the key table and the helpers are made.)  An id queued already (nothing written) goes
-- on below with the same now (its ZADD NX there adds nothing again), as does every other
-- push.
local plain_shard, early_now = nil, nil
if #ARGV == 8 and not TRACK and ARGV[2] == 'keep' and ARGV[3] == '' and ARGV[4] == ''
    and ARGV[5] == 'n' then
  plain_shard = redis.pcall('exists', K.hold, K.group_turns_zset, K.group_waits_zset, K.group_base) == 0
  if plain_shard then
    local at, id = ARGV[1], ARGV[7]
    if at == '' then
      local time = redis.call('time')
      at = time[1] .. '.' .. string.rep('0', 6 - #time[2]) .. time[2]
    end
    early_now = at
    if redis.call('zadd', K.perform_in_zset, 'nx', at, id) == 1 then
      redis.call('zadd', K.fresh_lex_zset, '0', id .. '\0' .. struct.pack('>d', at + 0) .. ARGV[8])
      if redis.call('llen', K.wake_list) == 0 then
        redis.call('rpush', K.wake_list, '1')
      else
        -- A wake-up is pending: unpack_piling (_common.lua), spelled out (by EVALSHA
        -- these lines run before the helpers are made), its mark 80 bytes 255.
        local encoding = redis.pcall('object', 'encoding', K.perform_in_zset)
        if type(encoding) == 'string' and encoding ~= 'skiplist'
            and redis.call('zcard', K.perform_in_zset) >= 8 then
          local mark = string.rep('\255', 80)
          for _, key in ipairs({K.perform_in_zset, K.fresh_lex_zset}) do
            redis.call('zadd', key, '0', mark)
            redis.call('zrem', key, mark)
          end
        end
      end
      return 1
    end
  end
end
-- } early
if plain_shard or redis.pcall('exists', K.hold, K.group_turns_zset, K.group_waits_zset, K.group_base) == 0 then
  grouped_known, base_known = false, ''
elseif retired() then
  return -1
end
local now = early_now or clock(ARGV[1])  -- (the early lines' now: one TIME a call)
local now_score = now + 0
local now_bytes = struct.pack('>d', now_score)
local merge = ARGV[2]
local once_name = false  -- a push made once: its name, in its enqueued events ('once')
if #merge > 6 then
  local ttl_at = string.find(merge, '\0', 1, true)
  local name_at = string.find(merge, '\0', ttl_at + 1, true)
  once_name = string.sub(merge, name_at + 1)
  local once = K.once_flag(once_name)
  if redis.call('set', once, '1', 'nx', 'ex', string.sub(merge, ttl_at + 1, name_at - 1)) == false then
    return 0
  end
  merge = string.sub(merge, 1, ttl_at - 1)
end

-- Between the id and the body of a job of form 'n': its member's NUL, then now.
local unscored_infix = '\0' .. now_bytes
-- queued_at of each chunk the group check read (by its first argument), or nil.
local refused, known_of_chunk = push_check_groups(ARGV)
if refused then return refused end

local argv = ARGV
local total = 0
local i = 3
while i <= #argv do
  local perform_in, group, form, count = argv[i], argv[i + 1], argv[i + 2], tonumber(argv[i + 3])
  if perform_in == '' then
    perform_in = now
  elseif string.byte(perform_in) == 43 then  -- '+': a delay from now
    perform_in = string.format('%.6f', now_score + tonumber(string.sub(perform_in, 2)))
  end
  local unscored, to_stamp = form == 'n', form == 'm'
  local rescheduled_at = merge ~= 'keep' and tonumber(perform_in)
  local last = i + 3 + count
  -- The new jobs of the section, written by one ZADD a key (a few for many):
  -- `lex_args` 0, member pairs; `schedule_args` perform_in, id pairs, of the ids
  -- schedule_new did not schedule (it schedules every chunk of a section or none).
  local lex_args, schedule_args, new = {}, {}, 0
  -- For a bulk section, how many ids the shard holds queued, fresh or retries: with
  -- none, no id of the section is queued (no ZMSCORE); at least as many as the fresh
  -- lex zset holds (add_many asks no ZCARD).  nil: not asked.
  local queued_count = count >= BULK_PAIRS and redis.call('zcard', K.perform_in_zset) or nil
  -- A section into no group index schedules its new ids before it merges the others.
  local plain = not grouped() and group == base_group()
  for first = i + 4, last, PUSH_CHUNK do
    local chunk_last = math.min(first + PUSH_CHUNK - 1, last)
    local known = known_of_chunk and known_of_chunk[first]  -- read by the group check
    local scheduled = false
    if not known then
      if queued_count == 0 then
        known = NONE_KNOWN
      elseif plain then
        wake_if_sooner(perform_in, now)
        known, scheduled = schedule_new(argv, first, chunk_last, perform_in, queued_count), true
      else
        known = queued_at(argv, first, chunk_last)
      end
    end
    local merged = TRACK and {}
    for j = first, chunk_last do
      local id, body = argv[j], argv[j + count]
      local member = body
      if unscored then
        member = id .. unscored_infix .. body
      elseif to_stamp then
        member = stamped(body, id, now_bytes, now_score)
      end
      local at = known[j - first + 1]
      if at then
        queue_merge(id, blob_of(member, id), perform_in, -1, nil, true, now)
        if rescheduled_at then
          push_reschedule(id, perform_in, rescheduled_at, tonumber(at), merge == 'max', now)
        end
        if TRACK then merged[#merged + 1] = id end
      else
        new = new + 2
        lex_args[new - 1] = '0'  -- a string: Redis would format a number with snprintf
        lex_args[new] = member
        if not scheduled then
          schedule_args[new - 1] = perform_in
          schedule_args[new] = id
        end
      end
    end
    if TRACK and once_name then
      track(K, 'enqueued', table.concat(argv, '\0', first, chunk_last), 'perform_in',
        perform_in, 'group', group, 'merged', table.concat(merged, '\0'), 'once', once_name)
    elseif TRACK then
      track(K, 'enqueued', table.concat(argv, '\0', first, chunk_last), 'perform_in',
        perform_in, 'group', group, 'merged', table.concat(merged, '\0'))
    end
  end
  if new > 0 then add_many('zadd', K.fresh_lex_zset, lex_args, queued_count) end
  if #schedule_args > 0 then
    wake_if_sooner(perform_in, now)
    if not plain then groups().add(schedule_args, group, perform_in, now) end
    add_many('zadd', K.perform_in_zset, schedule_args, queued_count)
  end
  total = total + count
  i = last + count + 1
end
return total
