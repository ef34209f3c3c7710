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
if retired() then return -1 end
local now = clock(ARGV[1])
local now_score = tonumber(now)
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

-- The next double after the score `x` (> 0): one unit in its last place, a fraction
-- of a microsecond for a unix time (2^-22 s until 2038).
local function next_score(x)
  local _, exponent = math.frexp(x)
  return x + math.ldexp(1, exponent - 53)
end

-- A member with every SCORE_NOW of its blob (lowkiq.storage.blob: the NaN whose
-- bytes begin 0x7f 0xf8, never a score of its own, first in the blob, in the order
-- given) replaced by now, the next ones by the next doubles after now: payloads
-- given without a score keep their order, and come before those of a later call
-- (whose now is a microsecond later at least, and its script started after this
-- one ran).  Equal payloads then keep the smaller score.  Members without one come
-- back as they are.
local function stamped(member, id)
  local at = #id + 2
  local b1, b2 = string.byte(member, at, at + 1)
  if b1 ~= 127 or b2 ~= 248 then return member end
  if at + HEADER_SIZE - 1 + struct.unpack('>I4', member, at + 8) == #member then
    return id .. '\0' .. now_bytes .. string.sub(member, at + 8)  -- one payload
  end
  local pairs_ = blob_pairs(string.sub(member, at))
  local score = now_score
  for _, pair in ipairs(pairs_) do
    if pair[1] ~= pair[1] then
      pair[1] = score
      score = next_score(score)
    end
  end
  return id .. '\0' .. blob_merge(blob_pack(pairs_), '')
end

-- A queued job's perform_in moved to `perform_in` (a string; `at` its number) by an
-- enqueue, as ARGV[2] says (not 'keep'): `queued` is its perform_in now.
local function reschedule(id, perform_in, at, queued)
  if at == queued or (merge == 'max' and at < queued) then return end
  wake_if_sooner(perform_in, now)
  reschedule_queued(id, perform_in, now)
  -- A hot id that yielded to the due ids (pop.lua) now counts from its new perform_in.
  redis.call('zrem', K.due_since_zset, id)
end

-- The ids and bodies of the sections, read straight from the arguments.
local argv = ARGV
-- Between the id and the body of a job of form 'n': its member's NUL, then now.
local unscored_infix = '\0' .. now_bytes

-- At most so many ids a ZMSCORE (unpack puts each on Lua's stack).
local CHUNK = 1000

-- The perform_in of each of the ids argv[first..last] that is queued (false when not).
local function queued_at(first, last)
  return redis.call('zmscore', K.perform_in_zset, unpack(argv, first, last))
end

-- queued_at of each chunk (by its first argument) that check_groups read: the push
-- reuses them (ids are unique within a call, so writing one chunk changes nothing
-- another read).
local known_of_chunk = {}

-- An id may not change its group while queued: a job naming a group other than its
-- queued id's refuses the whole push, before anything is written.
local function check_groups()
  local i = 3
  while i <= #argv do
    local group, count = argv[i + 1], tonumber(argv[i + 3])
    local last = i + 3 + count
    if group ~= '' then
      -- Many ids (worth a call): nothing queued, nothing to check.
      if count >= BULK_PAIRS and redis.call('zcard', K.perform_in_zset) == 0 then return end
      for first = i + 4, last, CHUNK do
        local known = queued_at(first, math.min(first + CHUNK - 1, last))
        known_of_chunk[first] = known
        for n, at in ipairs(known) do
          if at then
            local id = argv[first + n - 1]
            local queued = groups().group_of(id)
            if queued ~= group then
              return redis.error_reply('GROUP ' .. #id .. ' ' .. id .. queued)
            end
          end
        end
      end
    end
    i = last + count + 1
  end
end

local refused = check_groups()
if refused then return refused end

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
  -- `lex_args` 0, member pairs; `schedule_args` perform_in, id pairs.
  local lex_args, schedule_args, new = {}, {}, 0
  -- For a bulk section, how many ids the shard holds queued, fresh or retries: with
  -- none, no id of the section is queued (no ZMSCORE); at least as many as the fresh
  -- lex zset holds (add_many asks no ZCARD).  nil: not asked.
  local queued_count = count >= BULK_PAIRS and redis.call('zcard', K.perform_in_zset) or nil
  for first = i + 4, last, CHUNK do
    local chunk_last = math.min(first + CHUNK - 1, last)
    local known = known_of_chunk[first]
      or queued_count ~= 0 and queued_at(first, chunk_last) or {}
    local merged = {}
    for j = first, chunk_last do
      local id, body = argv[j], argv[j + count]
      local member = body
      if unscored then
        member = id .. unscored_infix .. body
      elseif to_stamp then
        member = stamped(body, id)
      end
      local at = known[j - first + 1]
      if at then
        queue_merge(id, blob_of(member, id), perform_in, -1, nil, true, now)
        if rescheduled_at then reschedule(id, perform_in, rescheduled_at, tonumber(at)) end
        if TRACK then merged[#merged + 1] = id end
      else
        new = new + 2
        lex_args[new - 1] = '0'  -- a string: Redis would format a number with snprintf
        lex_args[new] = member
        schedule_args[new - 1] = perform_in
        schedule_args[new] = id
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
  if new > 0 then
    wake_if_sooner(perform_in, now)
    if grouped() or group ~= base_group() then groups().add(schedule_args, group, perform_in, now) end
    add_many('zadd', K.fresh_lex_zset, lex_args, queued_count)
    add_many('zadd', K.perform_in_zset, schedule_args, queued_count)
  end
  total = total + count
  i = last + count + 1
end
return total
