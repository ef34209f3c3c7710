-- Shared helpers, prepended to every script after the generated key prelude
-- (lowkiq/storage/keys.py: lua_prelude), so `K`, `P` and `keys_at` are in
-- scope. Every script works on one shard, the one of KEYS[1] (`K`); only pop
-- may also ack another shard (keys_at(KEYS[2])), and never on a Redis Cluster.
--
-- Job layout: a queued job lives in K.fresh_lex_zset (retry_count -1) or in
-- K.retry_lex_zset (retry_count >= 0, with K.retry_count_zset), as member
-- `id \0 blob`, and in K.perform_in_zset; its last error, if any, in
-- K.errors_hash (a dead job queued up again is fresh and keeps its error); a
-- hot id that yielded to the due ids, when it first became due, in K.due_since_zset.
-- In a shard that holds jobs of groups (see "Groups" below), also in the index
-- of its group, K.group_ids_zset(group), and a group other than the default
-- one in K.group_of_hash.
-- A blob is repeated struct('>dI4') score, length, then payload bytes,
-- ascending by score; an empty blob marks a hot id (see payloads_add).
--
-- Cost: a loop run for every job or payload indexes its list (`for i = 1, #t`)
-- rather than calling ipairs, whose every step is a call of a C function; and the
-- pop takes its plain jobs without calling a helper (each call of a Lua function
-- costs Redis a few hundred instructions).  A time read as text (a score, now)
-- becomes a number by `text + 0` on the hot paths: tonumber(text) parses it twice
-- (strtod, some 1.1 k instructions for a time with six decimals, each).

-- Now on Redis's clock, unix seconds as a string with six decimals (TIME's
-- seconds and microseconds, joined: cheaper than formatting a number, and
-- exact): every due time, retry time, restore time and updated_at is Redis's,
-- whatever the clocks of the hosts running workers say.  `given`, when not
-- empty, is used instead (a fixed clock for tests).
local function clock(given)
  if given and given ~= '' then return given end
  local time = redis.call('time')
  local micros = time[2]
  return time[1] .. '.' .. string.rep('0', 6 - #micros) .. micros
end

-- Redis hands a command a Lua number as snprintf("%.17g") writes it, some two thousand
-- instructions: the counts, ranks and limits the pop, its ack and the group picker pass
-- go as INTEGER_TEXT[n], the integer's decimal text, made by '%d' and kept for those
-- below 4096 (with Redis Functions, from call to call; by EVALSHA, whose tables last one
-- call, it saves nothing).
local function integer_text(texts, n)
  local text = string.format('%d', n)
  if n >= 0 and n < 4096 then texts[n] = text end
  return text
end
local INTEGER_TEXT = setmetatable({}, {__index = integer_text})

-- Worker.track: one event (its name, then field, value pairs) of the job `id`, or of
-- each job of a batch or an enqueue (`ids`: their ids joined by NUL, which no id holds:
-- one entry for them all), in the events stream of the shard whose keys are `keys`,
-- capped at about TRACK entries.  TRACK is the worker's track_length, or false: a
-- script calls this only `if TRACK`, so a worker without tracking pays nothing.
local function track(keys, event, ids, ...)
  redis.call('xadd', keys.events_stream, 'maxlen', '~', TRACK, '*', 'event', event, 'id', ids, ...)
end

-- An error's first line (its class and message), at most 200 bytes (not cutting a
-- UTF-8 character), for an event.
local function error_summary(error)
  if not error then return '' end
  local stop = math.min((string.find(error, '\n', 1, true) or (#error + 1)) - 1, 200)
  while stop > 0 and stop < #error do
    local byte = string.byte(error, stop + 1)
    if byte < 128 or byte >= 192 then break end  -- not inside a character
    stop = stop - 1
  end
  return string.sub(error, 1, stop)
end

local HEADER = '>dI4'
local HEADER_SIZE = 12

local function blob_pairs(blob)
  local pairs_ = {}
  local pos = 1
  local size = #blob
  while pos <= size do
    local score, len = struct.unpack(HEADER, blob, pos)
    pos = pos + HEADER_SIZE
    pairs_[#pairs_ + 1] = {score, string.sub(blob, pos, pos + len - 1)}
    pos = pos + len
  end
  return pairs_
end

local function blob_pack(pairs_)
  local parts = {}
  for i = 1, #pairs_ do
    local pair = pairs_[i]
    parts[i] = struct.pack(HEADER, pair[1], #pair[2]) .. pair[2]
  end
  return table.concat(parts)
end

-- Union of two blobs; equal payloads keep the smallest score.  Returns the
-- blob and its payload count.
local function blob_merge(a, b)
  local best = {}
  for _, blob in ipairs({a, b}) do
    local pairs_ = blob_pairs(blob)
    for i = 1, #pairs_ do
      local pair = pairs_[i]
      local known = best[pair[2]]
      if known == nil or pair[1] < known then best[pair[2]] = pair[1] end
    end
  end
  local merged = {}
  for payload, score in pairs(best) do merged[#merged + 1] = {score, payload} end
  table.sort(merged, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    return x[2] < y[2]
  end)
  return blob_pack(merged), #merged
end

-- The first (smallest score) payload as a blob, and the rest as a blob.
local function blob_split_first(blob)
  local _, len = struct.unpack(HEADER, blob, 1)
  local cut = HEADER_SIZE + len
  return string.sub(blob, 1, cut), string.sub(blob, cut + 1)
end

-- Hot ids: a job whose payloads outgrow SPILL_PAYLOADS or SPILL_BYTES keeps
-- them in a sorted set of its own (member payload, score score) and an empty
-- blob in its lex member.  Below, a job's payloads are `blob`, or when blob is
-- '' the sorted set `key`; `nil` is "no job".

local ZADD_CHUNK = 1000

-- ZADD LT a list of {score, payload} into `key`: equal payloads keep the smallest score.
local function zadd_pairs(key, pairs_)
  local args = {'LT'}
  for i = 1, #pairs_ do
    local pair = pairs_[i]
    args[#args + 1] = pair[1]
    args[#args + 1] = pair[2]
    if #args > 2 * ZADD_CHUNK then
      redis.call('zadd', key, unpack(args))
      args = {'LT'}
    end
  end
  if #args > 1 then redis.call('zadd', key, unpack(args)) end
end

-- `command key args...` for a list `args` of any length (unpack is limited by Lua's
-- stack), ARGS_CHUNK arguments a call (even: field/value pairs stay together);
-- nothing for an empty list.  `from`, `to`: only args[from..to] (default: all).
-- Returns the sum of the replies (what an SADD, HSET or HDEL counted).  `option`: a
-- flag each call carries first (ZADD's 'nx'); `chunk`: so many arguments a call instead.
local ARGS_CHUNK = 2000
local function call_many(command, key, args, from, to, option, chunk)
  to = to or #args
  chunk = chunk or ARGS_CHUNK
  local total = 0
  for first = from or 1, to, chunk do
    local last = math.min(first + chunk - 1, to)
    if option then
      total = total + redis.call(command, key, option, unpack(args, first, last))
    else
      total = total + redis.call(command, key, unpack(args, first, last))
    end
  end
  return total
end

-- A field or member no lowkiq key holds: longer than zset-max-ziplist-value and
-- hash-max-ziplist-value (64 bytes by default), not UTF-8 (as every id is: byte
-- 255), no NUL (as every lex member `id \0 blob` has).  A literal: a Functions
-- library's top level has no `string`.
local BULK_MARK = '\255lowkiq: the mark of a bulk write, longer than any member of a packed key'
-- zset-max-ziplist-entries and hash-max-ziplist-entries by default: the most
-- members (fields) a packed sorted set (hash) holds.
local PACKED_ZSET_MOST = 128
local PACKED_HASH_MOST = 512
-- The fewest pairs added at once that make a packed key a skiplist (a hash table).
local BULK_PAIRS = 16
-- Arguments an add_many call gives each ZADD or HSET.  Redis hands a command its first
-- 32 arguments from a script in objects it keeps for the next call
-- (LUA_CMD_OBJCACHE_SIZE), the others in objects made and freed each time: calls of 64
-- cost an enqueue of 1,000 jobs a call 2 % less than calls of 2,000 (callgrind).
local ADD_CHUNK = 64

-- call_many of ZADD (score, member pairs) or HSET (field, value pairs) into `key`.
-- Redis (6.2, 7.0) keeps a new key packed (a ziplist / listpack), whatever the
-- number of pairs given, until it outgrows PACKED_*_MOST, and each pair added to a
-- packed key scans it (parsing each score on 6.2): the first 128 members of a
-- sorted set cost ten times what as many cost in a skiplist, the first 512 fields
-- of a hash more still.  BULK_PAIRS or more pairs into a key that may be packed
-- (asked with a ZCARD / HLEN) therefore first make it a skiplist (a hash table):
-- a member longer than a packed key holds converts it at once; it is taken out
-- again in the same call, so no one ever sees it.  (A small key made so stays a
-- skiplist, some bytes a member larger, until it empties.)  `size`, when given, is
-- at least the key's size (the caller knows it: no ZCARD).  `from`: only args[from..]
-- (default: all); `option`: call_many's (ZADD's 'nx').  Returns what the calls return,
-- summed (the pairs added).
local function add_many(command, key, args, size, from, option)
  from = from or 1
  local zset = command == 'zadd'
  local convert = #args - from + 1 >= 2 * BULK_PAIRS
    and (size or redis.call(zset and 'zcard' or 'hlen', key))
      <= (zset and PACKED_ZSET_MOST or PACKED_HASH_MOST)
  if convert then redis.call(command, key, zset and '0' or BULK_MARK, zset and BULK_MARK or '') end
  local added = call_many(command, key, args, from, nil, option, ADD_CHUNK)
  if convert then redis.call(zset and 'zrem' or 'hdel', key, BULK_MARK) end
  return added
end

-- Add every member of the sorted set `from` into `into` (ZADD LT).
local function zadd_zset(into, from)
  local start = 0
  while true do
    local rows = redis.call('zrange', from, INTEGER_TEXT[start],
      INTEGER_TEXT[start + ZADD_CHUNK - 1], 'withscores')
    if #rows == 0 then return end
    local pairs_ = {}
    for i = 1, #rows, 2 do pairs_[#pairs_ + 1] = {rows[i + 1], rows[i]} end
    zadd_pairs(into, pairs_)
    start = start + ZADD_CHUNK
  end
end

-- Take out up to `limit` smallest-score payloads of the sorted set `key`, as a
-- blob; also returns how many.
local function zset_take(key, limit)
  local rows = redis.call('zrange', key, '0', INTEGER_TEXT[limit - 1], 'withscores')
  local pairs_ = {}
  for i = 1, #rows, 2 do pairs_[#pairs_ + 1] = {rows[i + 1] + 0, rows[i]} end
  redis.call('zremrangebyrank', key, '0', INTEGER_TEXT[limit - 1])
  return blob_pack(pairs_), #pairs_
end

-- Add the packed payloads `blob` to a job's payloads `dest` (a blob, '' = in
-- dest_key, or nil); returns the job's new blob ('' once they live in dest_key).
local function payloads_add(dest, dest_key, blob)
  if dest == nil then return blob end
  if dest == '' then
    zadd_pairs(dest_key, blob_pairs(blob))
    return ''
  end
  if dest == blob then return dest end
  local size = #dest
  if size == #blob and size == HEADER_SIZE + struct.unpack('>I4', dest, 9)
    and string.sub(dest, 9) == string.sub(blob, 9) then
    -- One payload each, the same one (a job enqueued again): the smaller score, as
    -- blob_merge would give it, without its tables.
    if struct.unpack('>d', blob) < struct.unpack('>d', dest) then return blob end
    return dest
  end
  local merged, count = blob_merge(dest, blob)
  if count > 1 and (count > SPILL_PAYLOADS or #merged > SPILL_BYTES) then
    zadd_pairs(dest_key, blob_pairs(merged))
    return ''
  end
  return merged
end

-- Move a job's payloads (`blob`, or '' = in src_key) onto `dest` (as in
-- payloads_add); returns the new blob of dest.  Two sorted sets merge the
-- smaller into the larger.
local function payloads_move(blob, src_key, dest, dest_key)
  if blob ~= '' then return payloads_add(dest, dest_key, blob) end
  if dest ~= nil and dest ~= '' then
    zadd_pairs(src_key, blob_pairs(dest))
  elseif dest == '' then
    local small, large = src_key, dest_key
    if redis.call('zcard', src_key) > redis.call('zcard', dest_key) then
      small, large = dest_key, src_key
    end
    zadd_zset(large, small)
    redis.call('unlink', small)
    if large == dest_key then return '' end
  end
  redis.call('rename', src_key, dest_key)
  return ''
end

-- Forget a job's payloads (its sorted set, when it has one).
local function payloads_drop(blob, key)
  if blob == '' then redis.call('unlink', key) end
end

-- (Numbers written as strings: Redis formats a number argument with snprintf.)
local function find_member(zset, id)
  return redis.call('zrangebylex', zset, '[' .. id .. '\0', '(' .. id .. '\1', 'limit', '0', '1')[1]
end

local function blob_of(member, id)
  return string.sub(member, #id + 2)
end

-- A queued retry: its lex member and true, or nil.
local function find_retry(id)
  local member = find_member(K.retry_lex_zset, id)
  if member then return member, true end
  return nil, false
end

-- A queued job: its lex member and whether it is a retry, or nil.
local function find_queued(id)
  local member = find_member(K.fresh_lex_zset, id)
  if member then return member, false end
  return find_retry(id)
end

-- The first `count` members of the sorted set `key` scored at most `max`, as a flat list
-- member, score, by score then member (`count_arg`, if given: `count` as the caller got
-- it), for a pop's due ids and its groups' heads.  A `ZRANGEBYSCORE` `WITHSCORES` formats each
-- score with printf (1.5 k instructions on Redis 7.0, 3 k on 6.2); when the first two
-- share a score (a run: an enqueue call's ids share Redis's time), the members at that
-- score are read without it, then the later ones with theirs.  (A score read back is the
-- same double.)  Up to RANKED_ONE_READ members are read in one call, with their scores:
-- a call more costs more than that many scores formatted (pops of 2 to 4 one-job
-- batches, callgrind: 1.4 to 2.3 % less a job on 7.0 and 6.2, groups or none).
local RANKED_ONE_READ = 5
local function ranked(key, max, count, count_arg)
  if count <= RANKED_ONE_READ then
    return redis.call('zrangebyscore', key, '-inf', max, 'withscores', 'limit', '0',
      count_arg or INTEGER_TEXT[count])
  end
  local found = redis.call('zrangebyscore', key, '-inf', max, 'withscores', 'limit', '0', '2')
  if #found < 4 then return found end
  local at, rest = found[2], nil
  if found[4] ~= at then
    rest = redis.call('zrangebyscore', key, '-inf', max, 'withscores', 'limit', '2',
      INTEGER_TEXT[count - 2])
  else
    local run = redis.call('zrangebyscore', key, at, at, 'limit', '2', INTEGER_TEXT[count - 2])
    for i = 1, #run do
      found[3 + 2 * i] = run[i]
      found[4 + 2 * i] = at
    end
    local left = count - 2 - #run
    if left <= 0 then return found end
    rest = redis.call('zrangebyscore', key, '(' .. at, max, 'withscores', 'limit', '0',
      INTEGER_TEXT[left])
  end
  local n = #found
  for i = 1, #rest do found[n + i] = rest[i] end
  return found
end

-- The members of the fresh zset a pop's first read of a run takes, and the most any
-- read takes (find_in_run).
local RUN_READ_FIRST = 4
local RUN_READ_MAX = 64

-- find_queued for a pop taking the ids of a run: `left` ids (`id` first) due at one
-- perform_in, enqueued by one call.  They come in id order, the fresh zset's order too
-- (an id holds no NUL), so their members follow one another there, with at most other
-- queued ids between them: one ZRANGEBYLEX reads the members from `id` on, and the next
-- ids of the run are looked for in what it read before they are read one by one.  A read
-- takes `run.window` members (RUN_READ_FIRST at first, at most the ids left), four times as
-- many as the last one when that one gave more than its first id, else 2.  `run` is the
-- pop's state, {window = RUN_READ_FIRST} at first; run.read = nil when a new run starts.
local function find_in_run(run, id, left)
  local key = id .. '\0'
  local read = run.read
  if read then
    local n = #key
    for at = run.at, #read do
      local member = read[at]
      if string.sub(member, 1, n) == key then
        run.at, run.hits = at + 1, run.hits + 1
        return member, false
      end
    end
    run.read = nil
    run.window = run.hits > 1 and math.min(run.window * 4, RUN_READ_MAX) or 2
  end
  if left < 2 then return find_queued(id) end
  read = redis.call('zrangebylex', K.fresh_lex_zset, '[' .. key, '+', 'limit', '0',
    INTEGER_TEXT[math.min(left, run.window)])
  run.read, run.at, run.hits = read, 1, 0
  local member = read[1]
  if member and string.sub(member, 1, #key) == key then
    run.at, run.hits = 2, 1
    return member, false
  end
  return find_retry(id)
end

-- Workflows (lowkiq.workflows): a payload enqueued inside a workflow is stored tagged:
-- the 5 bytes \255 \254 l k w, >I2 the tag's length, the tag (`workflow id \0 instance`),
-- then the payload.  When such a payload ends (`state` 'd' done, 'x' dead, 'c' discarded)
-- or fails for a retry ('f'), one field of the shard's outbox K.wf_outbox_hash says so:
-- `state \0 workflow \0 instance \0 queue \0 id \0 sha1 of the stored payload` (the last
-- three: the member); lowkiq.workflows.relay tells the workflow, idempotently, and deletes it.
-- A blob without a tag costs one string.find.  With `fields` (a list), the field, value
-- pairs are added to it, for one HSET of many (wf_note_area), instead of written.
local function wf_note(id, blob, state, fields)
  if blob == '' or not string.find(blob, '\255\254lkw', 1, true) then return 0 end
  local queue = string.match(P, '{(.*):%d+}')
  local noted, own = 0, fields == nil
  fields = fields or {}
  for _, pair in ipairs(blob_pairs(blob)) do
    local payload = pair[2]
    if string.sub(payload, 1, 5) == '\255\254lkw' then
      local length = struct.unpack('>I2', payload, 6)
      fields[#fields + 1] = state .. '\0' .. string.sub(payload, 8, 7 + length) .. '\0' .. queue
        .. '\0' .. id .. '\0' .. string.sub(redis.sha1hex(payload), 1, 16)
      fields[#fields + 1] = '1'
      noted = noted + 1
    end
  end
  if own and noted > 0 then call_many('hset', K.wf_outbox_hash, fields) end
  return noted
end

-- wf_note of a queued job's payloads (its lex member's blob, or its sorted set).
local function wf_note_queued(id, member, state)
  local blob = blob_of(member, id)
  if blob ~= '' then return wf_note(id, blob, state) end
  local payloads = redis.call('zrange', K.payloads_zset(id), 0, -1, 'withscores')
  local pairs_ = {}
  for i = 1, #payloads, 2 do pairs_[#pairs_ + 1] = {tonumber(payloads[i + 1]), payloads[i]} end
  return wf_note(id, blob_pack(pairs_), state)
end

-- The fields of a workflow's state (W = `prefix`, `lowkiq:{wf:<id>}:`,
-- lowkiq.workflows.store) that say whether it is complete.
local WF_COUNTS = {'status', 'total', 'done', 'dead', 'discarded', 'cancelled'}
-- A workflow's members in `ended` (W ended:<instance>) still marked failed in `kept` (W
-- states): added to the set by a caller of workflow_settle that got -2, then crashed or
-- was overtaken before it called again.  They are failed no more: unmarked; returns
-- `failed` (the count) less them.  Read as the workflow is about to complete, so that
-- its callbacks' counts add up.
local function wf_unfail(ended, kept, failed)
  local entries = redis.call('hgetall', kept)
  local failing = {}
  for i = 1, #entries, 2 do
    if entries[i + 1] == 'f' then failing[#failing + 1] = entries[i] end
  end
  for low = 1, #failing, ARGS_CHUNK do
    local high = math.min(low + ARGS_CHUNK - 1, #failing)
    local is_ended = redis.call('smismember', ended, unpack(failing, low, high))
    local done = {}
    for j = 1, high - low + 1 do
      if is_ended[j] == 1 then done[#done + 1] = failing[low + j - 1] end
    end
    if #done > 0 then
      redis.call('hdel', kept, unpack(done))
      failed = failed - #done
    end
  end
  return failed
end

-- Once closed and every member ended (done, dead or discarded), a workflow is complete:
-- its status, completed_at and succeeded are written, with `fields` (more fields of
-- its state to write), in one HSET, and its keys (but W held, whose jobs wait for an
-- operator) set to expire in `ttl` ms: W state, W ended:<instance>, W registered, and
-- W states when a member is dead or discarded (else it is empty).  `f` is its state's
-- WF_COUNTS as HMGET returns them.  Returns 1 when this call completed it, else 0.  The
-- workflows one call completes complete at one time (one TIME).
local wf_completed_at = nil
local function wf_complete(now, ttl, prefix, instance, f, fields)
  local dead, discarded = tonumber(f[4] or '0'), tonumber(f[5] or '0')
  local complete = f[1] == 'closed'
    and tonumber(f[3] or '0') + dead + discarded >= tonumber(f[2])
  if complete then
    local succeeded = (dead == 0 and not f[6]) and '1' or '0'
    wf_completed_at = wf_completed_at or clock(now)
    fields[#fields + 1] = 'status'
    fields[#fields + 1] = 'complete'
    fields[#fields + 1] = 'completed_at'
    fields[#fields + 1] = wf_completed_at
    fields[#fields + 1] = 'succeeded'
    fields[#fields + 1] = succeeded
  end
  local state = prefix .. 'state'
  if #fields > 0 then redis.call('hset', state, unpack(fields)) end
  if not complete then return 0 end
  redis.call('pexpire', state, ttl)
  redis.call('pexpire', prefix .. 'ended:' .. instance, ttl)
  redis.call('pexpire', prefix .. 'registered', ttl)
  if dead + discarded > 0 then redis.call('pexpire', prefix .. 'states', ttl) end
  return 1
end

-- Groups (fairness, docs/SPEC.md §14).  A shard whose queued ids are all of one
-- group, its *base* group (K.group_base; absent: the default group ''), keeps no
-- other group key: its pop takes due ids by perform_in, as ever, and gives each the
-- base group.  Once ids of a second group are queued, the shard is *indexed*: every
-- queued id of the shard is also in the index of its group, K.group_ids_zset(group)
-- (id -> perform_in), and every group holding ids is in one of:
--   K.group_turns_zset  group -> its turn, a virtual time: its head was due
--                       when it was put there; pop serves the smallest turn
--                       and moves it on by 1 / weight a job (a start-time
--                       fair queue: a group that gets due work starts just
--                       after the smallest turn, behind the groups there, and
--                       one served until nothing of it is due keeps its turn
--                       until the turn comes round, so a group given one job at
--                       a time gets one job a round; see group_picker)
--   K.group_waits_zset  group -> at most the perform_in of its head, not due
--                       then; pop moves it to the turns once due
-- so the shard is indexed while either exists.  K.group_of_hash holds the group of
-- each queued id outside the base group.  The shard drops its group keys again once
-- its queued ids are of one group (and at most COLLAPSE_MAX of them: the index that
-- group needs when another comes is one COPY of that many), or none.
local grouped_known = nil
local base_known = nil
local function grouped()
  if grouped_known == nil then
    local turns, waits = K.group_turns_zset, K.group_waits_zset
    -- Most shards have no group key at all: one EXISTS says so, base group and all.
    local any = redis.pcall('exists', turns, waits, K.group_base)
    if any == 0 then
      grouped_known, base_known = false, ''
    elseif type(any) == 'number' then
      grouped_known = redis.call('exists', turns, waits) > 0
    else
      -- A script run with ASKING on a slot being imported may ask about a missing key,
      -- but not about several at once: one key an EXISTS.
      grouped_known = redis.call('exists', turns) == 1 or redis.call('exists', waits) == 1
    end
  end
  return grouped_known
end

local COLLAPSE_MAX = 10000

-- The shard's base group ('' when K.group_base does not exist).
local function base_group()
  if base_known == nil then base_known = redis.call('get', K.group_base) or '' end
  return base_known
end

-- The group helpers, made by the one script call that needs them (a script makes
-- each function it defines again on every call, and most shards have no group).
local group_helpers = nil
local function groups()
  if group_helpers then return group_helpers end
  local turns, waits = K.group_turns_zset, K.group_waits_zset
  local in_turns = {}  -- groups this call knows are in the turns

  local function set_base(g)
    if g == base_group() then return end
    if g == '' then redis.call('del', K.group_base) else redis.call('set', K.group_base, g) end
    base_known = g
  end

  -- The turn a group starts at: just after the smallest turn of the groups in the
  -- turns (behind the groups at it, whose names might sort after its own).
  local function first_turn()
    local smallest = tonumber(redis.call('zrange', turns, '0', '0', 'withscores')[2] or 0)
    return smallest + math.abs(smallest) * 1e-12 + 1e-12
  end

  -- Put group `g`, which just got an id scheduled at `at`, where it belongs.
  local function place(g, at, now)
    if in_turns[g] then return end
    if at + 0 <= now + 0 then
      if redis.call('zadd', turns, 'NX', first_turn(), g) == 1 then redis.call('zrem', waits, g) end
      in_turns[g] = true
    elseif redis.call('zscore', turns, g) then
      in_turns[g] = true
    else
      redis.call('zadd', waits, 'LT', at, g)
    end
  end

  -- The shard gets a second group: the ids queued so far are indexed in the base group.
  local function begin(now)
    grouped_known = true
    local g = base_group()
    local key = K.group_ids_zset(g)
    if redis.call('copy', K.perform_in_zset, key, 'replace') == 1 then
      place(g, redis.call('zrange', key, '0', '0', 'withscores')[2], now)
    end
  end

  local function group_of(id)
    if not grouped() then return base_group() end
    return redis.call('hget', K.group_of_hash, id) or base_group()
  end

  -- Index ids of group `g` (not yet in any), all scheduled at `at`: `scheduled` is
  -- the flat list at, id (as ZADD takes it).  In a shard not indexed, ids of its
  -- base group need nothing, and a shard with no queued id takes `g` as its base.
  local function add(scheduled, g, at, now)
    if not grouped() then
      if g == base_group() then return end
      if redis.call('exists', K.perform_in_zset) == 0 then
        set_base(g)
        return
      end
      begin(now)
    end
    add_many('zadd', K.group_ids_zset(g), scheduled)
    if g ~= base_group() then
      local of = {}
      for i = 2, #scheduled, 2 do
        of[i - 1] = scheduled[i]
        of[i] = g
      end
      add_many('hset', K.group_of_hash, of)
    end
    place(g, at, now)
  end

  -- A group whose index may have emptied leaves the turns and the waits; a shard
  -- whose queue emptied drops its turns (pop may keep a group with nothing queued in
  -- them: see group_picker).
  local function forget_if_empty(g)
    if redis.call('exists', K.group_ids_zset(g)) == 0 then
      redis.call('zrem', turns, g)
      redis.call('zrem', waits, g)
      in_turns[g] = nil
      if redis.call('exists', K.perform_in_zset) == 0 then
        redis.call('del', turns)
        for other in pairs(in_turns) do in_turns[other] = nil end
      end
    end
  end

  -- Take a queued id out of its group's index; returns the group.
  local function remove(id)
    local g = group_of(id)
    redis.call('zrem', K.group_ids_zset(g), id)
    if g ~= base_group() then redis.call('hdel', K.group_of_hash, id) end
    forget_if_empty(g)
    return g
  end

  -- A queued id of group `g` now scheduled at `at`.
  local function reschedule(id, g, at, now)
    redis.call('zadd', K.group_ids_zset(g), at, id)
    place(g, at, now)
  end

  -- An indexed shard whose queued ids are all of one group again (the turns hold that
  -- group alone, and the waits none), at most COLLAPSE_MAX of them, drops its group
  -- keys: that group becomes its base.  Returns whether it did.
  local function collapse()
    local rows = redis.call('zrange', turns, '0', '1')
    if #rows ~= 1 or redis.call('exists', waits) == 1 then return false end
    if redis.call('zcard', K.perform_in_zset) > COLLAPSE_MAX then return false end
    local g = rows[1]
    redis.call('unlink', K.group_ids_zset(g), turns, K.group_of_hash)
    set_base(g)
    grouped_known = false
    for other in pairs(in_turns) do in_turns[other] = nil end
    return true
  end

  group_helpers = {
    place = place, group_of = group_of, add = add,
    remove = remove, reschedule = reschedule, forget_if_empty = forget_if_empty,
    collapse = collapse, in_turns = in_turns,
  }
  return group_helpers
end

-- The choice of due jobs of a grouped shard, for pop.lua: the group with the
-- smallest turn gives its earliest due job, and its turn moves on by 1 / its
-- weight (`weights`: group -> weight; 1 when not named).  `first_turn` and
-- `first_wait` are the first max(limit, 2) entries of the turns (all, when fewer) and
-- the first of the waits when already read (or nil).  The pop takes at most `limit` jobs, so it reads at
-- most the first `limit` (at least two) groups of the turns and `limit` + 1 ids of
-- each group it serves, and writes what it took once, in finish().  A group of weight 0 is at its cap
-- (Worker.group_concurrency): it keeps its turn and gives no job.  Returns next_due() -> id, perform_in,
-- group (or nil) and how many of the group's heads read, from this one on, are due at
-- that perform_in; unpick(group): the job next_due just returned was not taken;
-- finish(); any_due() -> whether a group is in the turns.
local function group_picker(now, limit, weights, first_turn, first_wait)
  local turns, waits = K.group_turns_zset, K.group_waits_zset
  local at = now + 0
  -- Groups whose first job became due join the turns.
  first_wait = first_wait or redis.call('zrange', waits, '0', '0', 'withscores')
  if first_wait[2] and first_wait[2] + 0 <= at then
    first_turn = nil
    local G = groups()
    for _, g in ipairs(redis.call('zrangebyscore', waits, '-inf', now, 'limit', '0', '100')) do
      redis.call('zrem', waits, g)
      local head = redis.call('zrange', K.group_ids_zset(g), '0', '0', 'withscores')[2]
      if head then G.place(g, head, now) end
    end
  end
  -- The groups read: name -> {turn, heads (flat id, perform_in; read when first
  -- served), pos (of the next head), out (its next job is not due)}, in `order`.
  local pool, order = nil, {}
  local left = limit
  local capped = 0  -- groups of the pool at their cap

  local function add_rows(rows)
    for i = 1, #rows, 2 do
      local g = rows[i]
      local at_cap = weights[g] == 0
      pool[g] = {turn = rows[i + 1] + 0, pos = 1, out = at_cap}
      order[#order + 1] = g
      if at_cap then capped = capped + 1 end
    end
  end

  -- Whether the pool holds the one group of the turns: its turn then orders it
  -- against no other (a group joining starts just after it, whatever it is), and
  -- finish() does not write it.
  local lone = false

  local function load()
    local rows = first_turn  -- the first max(limit, 2), when given (`left` is the limit)
    if not rows then
      rows = redis.call('zrange', turns, '0', INTEGER_TEXT[math.max(left, 2) - 1], 'withscores')
    end
    first_turn = nil
    pool, order, capped = {}, {}, 0
    lone = #rows == 2
    add_rows(rows)
  end

  -- Whether finish() kept a group with nothing due in the turns (see below).
  local kept_idle = false

  -- Write the pool's changes: the ids taken leave their group's index; a group
  -- keeps its turn while its next job is due.  A group whose turn came with nothing
  -- due leaves for the waits (or for good, empty).  A group served until nothing of
  -- it is due keeps its new turn while a smaller turn stays, and leaves when its
  -- turn comes round: given due work before then, it would otherwise start just
  -- after the smallest turn, ahead of the groups it was served before, and take
  -- more turns given one job at a time than with a backlog.  Returns whether a
  -- group was kept so (the caller drops the turns of a shard left with no job), and
  -- how many groups of the pool stay in the turns (nil: no pool to write).
  local function finish()
    if not pool then return kept_idle, nil end
    -- The new turns (flat turn, group), the groups read with nothing due now, and
    -- the smallest turn of the groups staying.
    local moved, idle, staying = {}, {}, math.huge
    for _, g in ipairs(order) do
      local state = pool[g]
      local heads = state.heads
      if heads then
        -- The ids taken are the index's first (heads are read from its first rank on,
        -- and nothing else writes it before this): more than two leave by rank.
        if state.pos > 3 then
          redis.call('zremrangebyrank', K.group_ids_zset(g), '0', INTEGER_TEXT[state.pos - 2])
        elseif state.pos > 1 then
          local gone = {}
          for i = 1, state.pos - 1 do gone[i] = heads[2 * i - 1] end
          redis.call('zrem', K.group_ids_zset(g), unpack(gone))
        end
        local next_at = heads[2 * state.pos]
        state.next_at = next_at
        if next_at and next_at + 0 <= at then
          moved[#moved + 1] = state.turn
          moved[#moved + 1] = g
          staying = math.min(staying, state.turn)
        else
          idle[#idle + 1] = g
        end
      else
        staying = math.min(staying, state.turn)  -- not served, or at its cap
      end
    end
    -- The pool is the first groups of the turns: those past it have turns from the
    -- first one's on (read, before the turns change, when the pool does not settle it).
    local beyond, gone = nil, {}
    for _, g in ipairs(idle) do
      local state = pool[g]
      local keep = false
      if not state.out then
        keep = state.turn > staying
        if not keep then
          local rank = INTEGER_TEXT[#order]
          beyond = beyond
            or tonumber(redis.call('zrange', turns, rank, rank, 'withscores')[2] or math.huge)
          keep = state.turn > beyond
        end
      end
      if keep then
        moved[#moved + 1] = state.turn
        moved[#moved + 1] = g
        kept_idle = true
      else
        gone[#gone + 1] = g
        if group_helpers then group_helpers.in_turns[g] = nil end
        if state.next_at then redis.call('zadd', waits, state.next_at, g) end
      end
    end
    if not lone then call_many('zadd', turns, moved) end
    call_many('zrem', turns, gone)
    pool = nil
    return kept_idle, #order - #gone
  end

  -- Groups kept in the turns with nothing queued (see finish) come in runs, those
  -- served one after another.  Past a few of them found empty in a row, the turns
  -- are read RUN_CHUNK groups at a time: those whose index does not exist (one
  -- EXISTS a chunk, and a bisection to the first that does) leave at once, each out
  -- with nothing read, and the first group holding ids joins the pool.
  local RUN_CHUNK, RUN_START = 100, 3
  local empties = 0  -- groups found empty in a row

  local function pass_empty()
    empties = empties + 1
    if empties < RUN_START then
      local rank = INTEGER_TEXT[#order]
      add_rows(redis.call('zrange', turns, rank, rank, 'withscores'))
      return
    end
    while true do
      local rows = redis.call('zrange', turns, INTEGER_TEXT[#order],
        INTEGER_TEXT[#order + RUN_CHUNK - 1], 'withscores')
      local keys = {}
      for i = 1, #rows, 2 do keys[#keys + 1] = K.group_ids_zset(rows[i]) end
      if #keys == 0 then return end
      local empty = #keys  -- the first `empty` keys do not exist
      if redis.call('exists', unpack(keys)) > 0 then
        local holds = #keys  -- one of the first `holds` keys exists
        empty = 0
        while holds - empty > 1 do
          local mid = math.floor((empty + holds) / 2)
          if redis.call('exists', unpack(keys, empty + 1, mid)) > 0 then holds = mid else empty = mid end
        end
      end
      for i = 1, empty do
        local g = rows[2 * i - 1]
        pool[g] = {turn = rows[2 * i] + 0, pos = 1, out = true, heads = {}}
        order[#order + 1] = g
      end
      if empty < #keys then
        add_rows({rows[2 * empty + 1], rows[2 * empty + 2]})
        return
      end
    end
  end

  local function next_due()
    while left > 0 do
      if not pool then load() end
      if #order == 0 then return nil end
      local best, state = nil, nil
      for i = 1, #order do
        local g = order[i]
        local candidate = pool[g]
        if not candidate.out and (not best or candidate.turn < state.turn
            or (candidate.turn == state.turn and g < best)) then
          best, state = g, candidate
        end
      end
      if not best and capped > 0 then
        -- Groups at their cap stay in the turns: read the turns past the pool, or stop.
        local rows = redis.call('zrange', turns, INTEGER_TEXT[#order],
          INTEGER_TEXT[#order + left - 1], 'withscores')
        if #rows == 0 then
          finish()
          return nil
        end
        add_rows(rows)
      elseif not best then
        finish()  -- every group read is out: read the turns again
      else
        state.heads = state.heads or ranked(K.group_ids_zset(best), '+inf', left + 1)
        local heads, pos = state.heads, state.pos
        local id, perform_in = heads[2 * pos - 1], heads[2 * pos]
        if id and perform_in + 0 <= at then
          empties = 0
          -- The heads from this one on due at its perform_in (a run, see find_in_run).
          local run_end = state.run_end
          if not run_end or run_end < pos then
            run_end = pos
            while heads[2 * run_end + 2] == perform_in do run_end = run_end + 1 end
            state.run_end = run_end
          end
          state.pos = pos + 1
          state.turn = state.turn + 1 / (weights[best] or 1)
          left = left - 1
          return id, perform_in, best, run_end - pos + 1
        end
        -- Its next job is not due: the next group of the turns takes its place.
        state.out = true
        if #state.heads == 0 then
          pass_empty()
        else
          local rank = INTEGER_TEXT[#order]
          add_rows(redis.call('zrange', turns, rank, rank, 'withscores'))
        end
      end
    end
    return nil
  end

  local function unpick(g)
    local state = pool[g]
    state.pos = state.pos - 1
    state.turn = state.turn - 1 / (weights[g] or 1)
    left = left + 1
  end

  local function any_due()
    return redis.call('exists', turns) == 1
  end

  return next_due, unpick, finish, any_due
end

-- A queued id scheduled at `at` (a string) instead.
local function reschedule_queued(id, at, now)
  redis.call('zadd', K.perform_in_zset, at, id)
  if grouped() then
    local G = groups()
    G.reschedule(id, G.group_of(id), at, now)
  end
end


-- without_error: the caller knows the job has no error (skips an HDEL).  requeued: the
-- caller queues the id again at once, in its group, whose index it stays in (so the
-- group, not gone from the queue, keeps its turn).  Returns the job's group ('': the
-- default one).
local function remove_queued(id, member, is_retry, without_error, requeued)
  redis.call('zrem', K.perform_in_zset, id)
  local group
  if not grouped() then
    group = base_group()
  elseif requeued then
    group = groups().group_of(id)
  else
    group = groups().remove(id)
  end
  -- Only a hot id (empty blob) may have yielded to the due ids (see pop.lua).
  if #member == #id + 1 then redis.call('zrem', K.due_since_zset, id) end
  if not without_error then redis.call('hdel', K.errors_hash, id) end
  if is_retry then
    redis.call('zrem', K.retry_lex_zset, member)
    redis.call('zrem', K.retry_count_zset, id)
  else
    redis.call('zrem', K.fresh_lex_zset, member)
  end
  return group
end

-- Delete a queued job with its payloads.
local function delete_queued(id, member, is_retry)
  remove_queued(id, member, is_retry)
  payloads_drop(blob_of(member, id), K.payloads_zset(id))
end

-- A shard's schedule and lex sorted sets stay packed (listpacks) up to PACKED_ZSET_MOST
-- members, and each member added to a packed one scans it, parsing every score of the
-- schedule: some 1.5 k of Redis's instructions a queued job (a push of one job onto 100
-- costs Redis 7.0 234 k, onto a skiplist 60 k).  When jobs pile up (a wake-up is
-- pending already: no process waits on the shard) and the schedule holds PILING_JOBS or
-- more, both become skiplists (a member longer than a packed set holds, taken out again
-- at once), which they stay until they empty.  (push.lua's early lines do the same.)
local PILING_JOBS = 8
local function unpack_piling()
  local encoding = redis.pcall('object', 'encoding', K.perform_in_zset)
  if type(encoding) == 'string' and encoding ~= 'skiplist'
      and redis.call('zcard', K.perform_in_zset) >= PILING_JOBS then
    for _, key in ipairs({K.perform_in_zset, K.fresh_lex_zset}) do
      redis.call('zadd', key, '0', BULK_MARK)
      redis.call('zrem', key, BULK_MARK)
    end
  end
end

local woken = false
-- Tell the thread serving the shard that due work arrived, or that its next
-- job is now earlier than it thought (at most one element); when it was told
-- already, the shard's jobs may pile up (unpack_piling).
local function wake()
  if woken then return end
  woken = true
  local list = K.wake_list
  if redis.call('llen', list) == 0 then
    redis.call('rpush', list, '1')
  else
    unpack_piling()
  end
end

-- Wake the shard's thread when jobs about to be scheduled at `perform_in` are
-- due, or earlier than every job the shard holds: an idle thread blocks until
-- the earliest perform_in it knows of, so it must learn of an earlier one.
-- Call before writing them to K.perform_in_zset.
local function wake_if_sooner(perform_in, now)
  if woken then return end
  local at = perform_in + 0
  if at > now + 0 then
    local head = redis.call('zrange', K.perform_in_zset, 0, 0, 'withscores')[2]
    if head and head + 0 <= at then return end
  end
  wake()
end

-- perform_in is a string (exact); error is a string or nil; group a string ('' or
-- nil: the default group).
local function write_queued(id, blob, perform_in, retry_count, error, now, group)
  if retry_count < 0 then
    redis.call('zadd', K.fresh_lex_zset, 0, id .. '\0' .. blob)
  else
    redis.call('zadd', K.retry_lex_zset, 0, id .. '\0' .. blob)
    redis.call('zadd', K.retry_count_zset, retry_count, id)
  end
  if error then redis.call('hset', K.errors_hash, id, error) end
  wake_if_sooner(perform_in, now)
  group = group or ''
  if grouped() or group ~= base_group() then groups().add({perform_in, id}, group, perform_in, now) end
  redis.call('zadd', K.perform_in_zset, perform_in, id)
end

-- Merge a job into the queue.  keep_schedule: the queued job (if any) keeps
-- its perform_in, retry_count and error (SPEC rule 2); otherwise the incoming
-- values win (rules 3 and 4), but for the group: a queued job keeps its own.
-- Payloads always merge as a union; they are `blob`, or when blob is '' the
-- sorted set `src_key`.
local function queue_merge(id, blob, perform_in, retry_count, error, keep_schedule, now, src_key, group)
  local member, is_retry = find_queued(id)
  local queued = member and blob_of(member, id)
  local merged = payloads_move(blob, src_key, queued, K.payloads_zset(id))
  if member then
    if keep_schedule then
      if merged ~= queued then
        local lex = is_retry and K.retry_lex_zset or K.fresh_lex_zset
        redis.call('zrem', lex, member)
        redis.call('zadd', lex, 0, id .. '\0' .. merged)
      end
      return
    end
    group = remove_queued(id, member, is_retry, false, true)
  end
  write_queued(id, merged, perform_in, retry_count, error, now, group)
end

-- Merge payloads (`blob`, or '' = the sorted set `src_key`) into the morgue
-- entry of `id`; updated_at = now.  A dead job keeps its group (a string; ''
-- or nil: the default group) in K.morgue_group_of_hash.
local function morgue_merge(id, blob, error, now, src_key, group)
  local member = find_member(K.morgue_lex_zset, id)
  local dead = nil
  if member then
    redis.call('zrem', K.morgue_lex_zset, member)
    dead = blob_of(member, id)
  end
  blob = payloads_move(blob, src_key, dead, K.morgue_payloads_zset(id))
  redis.call('zadd', K.morgue_lex_zset, 0, id .. '\0' .. blob)
  redis.call('zadd', K.morgue_updated_at_zset, now, id)
  if error then
    redis.call('hset', K.morgue_errors_hash, id, error)
  else
    redis.call('hdel', K.morgue_errors_hash, id)
  end
  if group and group ~= '' then redis.call('hset', K.morgue_group_of_hash, id, group) end
end

-- Take a dead job out of the morgue; returns its blob ('' = its payloads are
-- in K.morgue_payloads_zset(id), left for the caller), its error and its group
-- (nil: the default one), or nil.
local function morgue_remove(id)
  local member = find_member(K.morgue_lex_zset, id)
  if not member then return nil end
  local error = redis.call('hget', K.morgue_errors_hash, id) or nil
  local group = redis.call('hget', K.morgue_group_of_hash, id) or nil
  redis.call('zrem', K.morgue_lex_zset, member)
  redis.call('zrem', K.morgue_updated_at_zset, id)
  redis.call('hdel', K.morgue_errors_hash, id)
  if group then redis.call('hdel', K.morgue_group_of_hash, id) end
  return blob_of(member, id), error, group
end

-- Delete a dead job with its payloads; returns whether there was one.
local function delete_dead(id)
  local blob = morgue_remove(id)
  if blob then payloads_drop(blob, K.morgue_payloads_zset(id)) end
  return blob ~= nil
end

-- Pop (pop.lua).  The first entries of a shard's turns (as many as the pop may serve
-- groups, at least two) and the first of its waits, once pop_extra read them (a shard
-- with groups): the choice of its jobs starts from them.
local pop_first_turn = nil
local pop_first_wait = nil

-- How many of the keys `a`, `b`, `c` and `d` (optional) of the shard exist, less its
-- group keys, asked in one EXISTS with them: K.group_turns_zset once and
-- K.group_waits_zset 5 times (EXISTS counts a key each time it is named), so that once
-- the turns are read the count says whether the waits exist too, besides how many of
-- the (at most 4) other keys do; and K.group_base, read when the count is not 0.  A
-- shard whose count is 0 asks no more.  Otherwise the first `span` (at least 2: the
-- pop's limit) entries of the turns are read, which group_picker then reads no more, and
-- the first of the waits when they exist (pop_first_turn, pop_first_wait).
local function pop_extra(span, a, b, c, d)
  local turns, waits = K.group_turns_zset, K.group_waits_zset
  local count
  if d then
    count = redis.call('exists', a, b, c, d, turns, waits, waits, waits, waits, waits, K.group_base)
  else
    count = redis.call('exists', a, b, c, turns, waits, waits, waits, waits, waits, K.group_base)
  end
  base_known = count > 0 and redis.call('get', K.group_base) or ''
  if base_known ~= '' then count = count - 1 end
  if count == 0 then
    grouped_known = false
    return 0
  end
  pop_first_turn = redis.call('zrange', turns, '0', INTEGER_TEXT[span - 1], 'withscores')
  if pop_first_turn[1] then count = count - 1 end
  local has_waits = count >= 5
  if has_waits then count = count - 5 end
  pop_first_wait = has_waits and redis.call('zrange', waits, '0', '0', 'withscores') or {}
  grouped_known = pop_first_turn[1] ~= nil or has_waits
  return count
end

-- A hot id of the batch being acked (in the shard's processing area `processing`) that
-- yielded (see pop.lua) queues again behind the ids due `at`, so those enqueued while
-- its batch ran come first too.
local function requeue_yielded(processing, at)
  local ids = redis.call('hkeys', processing)
  if #ids == 0 then return end
  local since = redis.call('zmscore', K.due_since_zset, unpack(ids))
  local behind = {'XX', 'GT'}
  for n, id in ipairs(ids) do
    if since[n] then
      behind[#behind + 1] = at
      behind[#behind + 1] = id
    end
  end
  if #behind == 2 then return end
  redis.call('zadd', K.perform_in_zset, unpack(behind))
  if grouped() then
    pop_first_turn, pop_first_wait = nil, nil  -- read again by the pop
    local G = groups()
    for i = 4, #behind, 2 do
      local g = G.group_of(behind[i])
      redis.call('zadd', K.group_ids_zset(g), 'XX', 'GT', at, behind[i])
      G.place(g, at, at)
    end
  end
end

-- A job in a processing area: struct('>di4i4') perform_in, retry_count,
-- error length (-1: none), then the error, then the blob.  A job of a group
-- other than the default one is prefixed with byte 255 (never the first byte of
-- a perform_in), struct('>I4') the group's length, and the group.
local PROCESSING_HEADER = '>di4i4'
local PROCESSING_HEADER_SIZE = 16

-- The prefix of each group's packed jobs, made once a script call (when one is packed).
local group_prefixes = nil

-- The header of the last job packed with no retry and no error, and its perform_in (the
-- ids of a run share it); pop.lua packs its plain jobs with them too.
local plain_head = nil
local plain_head_at = nil

local function processing_pack(perform_in, retry_count, error, blob, group)
  local head
  if retry_count == -1 and not error then
    if perform_in ~= plain_head_at then
      plain_head, plain_head_at = struct.pack(PROCESSING_HEADER, perform_in + 0, -1, -1), perform_in
    end
    head = plain_head
  else
    head = struct.pack(PROCESSING_HEADER, perform_in + 0, retry_count, error and #error or -1)
  end
  if group and group ~= '' then
    group_prefixes = group_prefixes or {}
    local prefix = group_prefixes[group]
    if not prefix then
      prefix = string.char(255) .. struct.pack('>I4', #group) .. group
      group_prefixes[group] = prefix
    end
    return prefix .. head .. (error or '') .. blob
  end
  return head .. (error or '') .. blob
end

-- perform_in (exact string), retry_count, error or nil, blob, group (nil: the default)
local function processing_unpack(value)
  local group = nil
  if string.byte(value) == 255 then
    local length = struct.unpack('>I4', value, 2)
    group = string.sub(value, 6, 5 + length)
    value = string.sub(value, 6 + length)
  end
  local perform_in, retry_count, err_len = struct.unpack(PROCESSING_HEADER, value, 1)
  local pos = PROCESSING_HEADER_SIZE + 1
  local error = nil
  if err_len >= 0 then
    error = string.sub(value, pos, pos + err_len - 1)
    pos = pos + err_len
  end
  return string.format('%.17g', perform_in), retry_count, error, string.sub(value, pos), group
end

-- An acked batch that held workflow members: its processing area is copied whole (C, no
-- Lua per job) to K.wf_done_hash(batch), named in the outbox as `a \0 batch`; the relay
-- reads the members there (they are done).  `keys`: the shard's key table.
local function wf_copy_area(keys, batch)
  if redis.call('copy', keys.processing_hash, keys.wf_done_hash(batch), 'replace') == 1 then
    redis.call('hset', keys.wf_outbox_hash, 'a\0' .. batch, '1')
  end
end

-- wf_note of every job of the processing area, whose HGETALL is `entries`, in one HSET.
local function wf_note_area(entries, state)
  local fields = {}
  for i = 1, #entries, 2 do
    local _, _, _, blob = processing_unpack(entries[i + 1])
    wf_note(entries[i], blob, state, fields)
  end
  if #fields > 0 then call_many('hset', K.wf_outbox_hash, fields) end
end

-- Jobs `ids` of the shard whose keys are `keys` ran to an end (acked, failed or
-- buried): forget how many times they were restored.  Only a shard with
-- restored jobs pays more than one EXISTS.
-- The restores hash also counts each id's yields (its field `\0` .. id: an id
-- holds no NUL), forgotten with its restores.
local function forget_counts(keys, ids)
  local fields = {}
  for i = 1, #ids do
    local id = ids[i]
    fields[2 * i - 1] = id
    fields[2 * i] = '\0' .. id
  end
  call_many('hdel', keys.restores_hash, fields)
end

local function forget_restores(keys, ids)
  if #ids > 0 and redis.call('exists', keys.restores_hash) == 1 then forget_counts(keys, ids) end
end

-- Clear the processing area of the shard whose keys are `keys` (K, or
-- keys_at(another prefix)) as done; returns how many jobs it held.  `restores`:
-- false when the caller knows keys.restores_hash does not exist.  `token`: the
-- lease the batch ran under, for its `done` event; false: the caller records it, and
-- gets the acked ids (joined by NUL) as a second value.
local function ack_processing(keys, restores, token)
  local processing = keys.processing_hash
  local count = redis.call('hlen', processing)
  local done, ids = nil, nil
  if count > 0 then
    if TRACK then
      ids = redis.call('hkeys', processing)
      done = table.concat(ids, '\0')
      if token then track(keys, 'done', done, 'fence', token) end
    end
    if restores ~= false and redis.call('exists', keys.restores_hash) == 1 then
      forget_counts(keys, ids or redis.call('hkeys', processing))
    end
    redis.call('del', processing)
    redis.call('incrby', keys.processed_counter, INTEGER_TEXT[count])
  end
  return count, done
end

-- Whether a reshard emptied the shard (its jobs live in the new shards now):
-- then nothing may be pushed into it, and actions find nothing in it.
local function retired()
  return redis.call('get', K.hold) == 'retired'
end

-- Whether `token` (`epoch owner`) is the current lease on the shard whose keys
-- are `keys`: only the holder of the current lease may pop, ack, fail or
-- restore the shard.
local function lease_held(keys, token)
  return redis.call('get', keys.lease) == token
end

-- A batch is named by the number its pop returned: K.batch_counter counts the
-- shard's pops that took jobs, and holds the number of the batch in its
-- processing area.  Ack, fail, yield, bury and restore name the batch they end,
-- and change nothing when the area holds another one (theirs ended already: it
-- was acked, failed or restored, and another pop took a new batch).  A shard
-- never popped holds batch 0 (none).
--
-- Whether `token` is the lease on the shard whose keys are `keys`, and whether its
-- processing area holds batch `batch` (both in one read).
local function lease_and_batch(keys, token, batch)
  local held = redis.call('mget', keys.lease, keys.batch_counter)
  return held[1] == token, (held[2] or '0') == batch
end

-- The error reply of a script that named a batch no longer in processing; it changed
-- nothing (the caller counts it in the shard's stale counter, in its metrics).
local function stale_batch(batch)
  return redis.error_reply('STALE ' .. P .. ': batch ' .. batch .. ' is no longer in processing')
end

-- The error reply of a script called with a stale lease; nothing was changed.
local function fenced()
  return redis.error_reply('FENCED ' .. P .. ': the lease is not held')
end

-- Put the shard's processing area back into the queue, the processing copy's
-- perform_in and retry_count winning (SPEC §3 rule 3), and its error, or else
-- the error of a job of that id queued meanwhile (a dead job queued up keeps
-- its error until it fails or succeeds).
-- With `max_restores` (a new owner restoring what its previous owner left: that
-- process died, or froze, running the batch), count each job's restores, and
-- move a job restored `max_restores` times to the morgue with `death_error`
-- instead: a job that kills its process is not run forever.
-- A job Worker.actions().cancel cancelled while this batch held it (K.cancelled_hash
-- names it with the batch's number, jobs_cancel.lua) does not go back: it is settled
-- as cancelled, as its performing process would have (cancel_settle.lua).
-- Returns how many jobs went back to the queue, and the flat list id, blob of
-- those moved to the morgue.  `token`: the lease of the restoring owner, and
-- `reason`, why the batch goes back unrun (nil: its owner died or stopped running
-- it), for the events.
local function restore_processing(now, max_restores, death_error, token, reason)
  local processing = K.processing_hash
  local entries = redis.call('hgetall', processing)
  local dead = {}
  local cancelled, settled = nil, 0
  if #entries > 0 and redis.call('exists', K.cancelled_hash) == 1 then
    cancelled = redis.call('get', K.batch_counter) or '0'
  end
  for i = 1, #entries, 2 do
    local id = entries[i]
    local perform_in, retry_count, error, blob, group = processing_unpack(entries[i + 1])
    if cancelled and redis.call('hget', K.cancelled_hash, id) == cancelled then
      redis.call('hdel', K.cancelled_hash, id)
      redis.call('hdel', K.restores_hash, id, '\0' .. id)
      wf_note(id, blob, 'c')
      settled = settled + 1
      if TRACK then track(K, 'cancelled', id, 'fence', token) end
    elseif max_restores and redis.call('hincrby', K.restores_hash, id, 1) >= max_restores then
      redis.call('hdel', K.restores_hash, id)
      morgue_merge(id, blob, death_error, now, nil, group)
      wf_note(id, blob, 'x')
      if TRACK then track(K, 'buried', id, 'fence', token, 'error', error_summary(death_error)) end
      dead[#dead + 1] = id
      dead[#dead + 1] = blob
    else
      error = error or redis.call('hget', K.errors_hash, id) or nil
      queue_merge(id, blob, perform_in, retry_count, error, false, now, nil, group)
      if TRACK then
        if reason then
          track(K, 'restored', id, 'fence', token, 'reason', reason)
        else
          track(K, 'restored', id, 'fence', token)
        end
      end
    end
  end
  redis.call('del', processing)
  if #dead > 0 then redis.call('incrby', K.failed_counter, #dead / 2) end
  if settled > 0 then redis.call('incrby', K.cancelled_counter, settled) end
  return #entries / 2 - #dead / 2 - settled, dead
end

-- Rate limits (lowkiq/limits/rate_limit.py).  A worker's token bucket is one hash in
-- a slot of its own, `lowkiq:{name:rate}:bucket`: `tokens` (below 0 while
-- reservations run ahead of the refill), `at` (ms on Redis's clock of the last
-- refill), `taken` (tokens reserved so far) and `waited` (reservations that had
-- to wait for the refill).  A shard's budget, K.rate_budget_hash, holds the
-- `tokens` it reserved and may spend from `from` (ms on Redis's clock); pop
-- refills it from the bucket itself on one server, and from the grant of a
-- rate_take call on a Redis Cluster, where the bucket is in another slot.
-- Reservations that wait for the refill are paid on a grid of `pace` ms of
-- Redis's clock, so the shards waiting for tokens come back together: their
-- pops meet at Redis in bursts rather than one at a time (each wake-up of an
-- idle server and thread costs CPU).

-- The rate-limit helpers, made by the one script call that needs them: a script
-- makes each Lua function it defines again on every call, and most pops have no
-- rate limit.  Returns them as a table.
local function rate_limits()
  -- ms a shard's unspent budget outlives the time it may be spent from.
  local RATE_BUDGET_GRACE = 10000

  -- Redis's clock, in ms.
  local function clock_ms()
    local time = redis.call('time')
    return tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
  end

  -- Reserve up to `want` tokens of `bucket` (refilled at `rate` tokens per ms,
  -- holding at most `capacity`): the whole tokens in it now, or when it holds
  -- none, `want` tokens spent from when the refill has paid for them and for
  -- every earlier reservation, rounded up to a multiple of `pace` ms (0: not
  -- rounded).  Returns how many and from when (ms on Redis's clock).
  local function bucket_reserve(bucket, want, rate, capacity, now, pace)
    local state = redis.call('hmget', bucket, 'tokens', 'at', 'taken', 'waited')
    local tokens = tonumber(state[1]) or capacity
    local at = tonumber(state[2]) or now
    local waited = tonumber(state[4]) or 0
    if now > at then
      tokens = math.min(capacity, tokens + (now - at) * rate)
      at = now
    end
    local from = now
    if tokens >= 1 then
      want = math.min(want, math.floor(tokens))
    else
      from = now + (want - tokens) / rate
      if pace > 0 then from = math.ceil(from / pace) * pace end
      waited = waited + 1
    end
    redis.call('hset', bucket, 'tokens', tokens - want, 'at', at,
      'taken', (tonumber(state[3]) or 0) + want, 'waited', waited)
    return want, from
  end

  -- Give back `count` reserved tokens that were not spent.
  local function bucket_return(bucket, count, capacity)
    local state = redis.call('hmget', bucket, 'tokens', 'taken')
    local tokens = tonumber(state[1])
    if tokens then
      redis.call('hset', bucket, 'tokens', math.min(capacity, tokens + count),
        'taken', (tonumber(state[2]) or 0) - count)
    end
  end

  -- The shard's budget before a pop: tokens, from, now (ms).  `grant` tokens
  -- (reserved by rate_take) are added; an empty budget is refilled from `bucket`
  -- (nil on a Redis Cluster) with `want` tokens, paid on the `pace` grid.
  local function rate_budget_open(want, rate, capacity, grant, bucket, pace)
    local now = clock_ms()
    local budget = redis.call('hmget', K.rate_budget_hash, 'tokens', 'from')
    local tokens = (tonumber(budget[1]) or 0) + grant
    local from = tonumber(budget[2]) or now
    if tokens <= 0 and bucket then
      tokens, from = bucket_reserve(bucket, want, rate, capacity, now, pace)
    end
    return tokens, from, now
  end

  -- Keep `tokens` in the shard's budget (none: drop it).
  local function rate_budget_keep(tokens, from, now)
    if tokens <= 0 then
      redis.call('del', K.rate_budget_hash)
      return
    end
    redis.call('hset', K.rate_budget_hash, 'tokens', tokens, 'from', from)
    redis.call('pexpire', K.rate_budget_hash, math.ceil(math.max(from - now, 0) + RATE_BUDGET_GRACE))
  end

  -- A pop found nothing due: `grant` tokens (rate_take's, on a Redis Cluster) join
  -- the shard's budget; on one server (`bucket` given) the budget, if it may be
  -- spent now, goes back to the bucket.
  local function rate_budget_idle(bucket, capacity, grant)
    if grant > 0 then
      local tokens, from, now = rate_budget_open(0, 0, 0, grant, nil, 0)
      rate_budget_keep(tokens, from, now)
    end
    if not bucket then return end
    local budget = redis.call('hmget', K.rate_budget_hash, 'tokens', 'from')
    local tokens = tonumber(budget[1])
    if tokens and tonumber(budget[2]) <= clock_ms() then
      bucket_return(bucket, tokens, capacity)
      redis.call('del', K.rate_budget_hash)
    end
  end

  -- The shard's budget after a pop left `left` tokens of it, `backlog` telling
  -- whether due jobs remain: with a backlog, an empty budget reserves the next
  -- pop's tokens now (so a thread learns when to come back without asking); without
  -- one, unspent tokens go back to the bucket.  Returns the ms to wait before the
  -- next pop, or -1: on a Redis Cluster, reserve tokens (rate_take) first.
  local function rate_budget_close(left, from, now, backlog, want, rate, capacity, pace, bucket)
    if bucket then
      if left <= 0 and backlog then
        left, from = bucket_reserve(bucket, want, rate, capacity, now, pace)
      elseif left > 0 and not backlog then
        bucket_return(bucket, left, capacity)
        left = 0
      end
    end
    rate_budget_keep(left, from, now)
    if left <= 0 then return backlog and -1 or 0 end
    return math.max(0, math.ceil(from - now))
  end

  return {
    clock_ms = clock_ms,
    bucket_reserve = bucket_reserve,
    budget_open = rate_budget_open,
    budget_keep = rate_budget_keep,
    budget_idle = rate_budget_idle,
    budget_close = rate_budget_close,
  }
end

-- Wake the coordinator of process `id` (it blocks on `M nudge:<id>`, M being the
-- ownership prefix): at most one element waits, kept NUDGE_TTL ms so a process
-- that is gone leaves nothing behind for long.
local NUDGE_TTL = 60000
local function nudge_process(M, id)
  local nudge = M .. 'nudge:' .. id
  if redis.call('llen', nudge) == 0 then
    redis.call('rpush', nudge, '1')
    redis.call('pexpire', nudge, NUDGE_TTL)
  end
end

-- Push (push.lua).  At most so many ids a ZMSCORE (unpack puts each on Lua's stack).
local PUSH_CHUNK = 1000
-- What a push knows of the ids of a chunk when the shard holds none queued: none is.
local NONE_KNOWN = {}

-- The next double after the score `x` (> 0): one unit in its last place, a fraction
-- of a microsecond for a unix time (2^-22 s until 2038).
local function next_score(x)
  local _, exponent = math.frexp(x)
  return x + math.ldexp(1, exponent - 53)
end

-- A member with every SCORE_NOW of its blob (lowkiq.storage.blob: the NaN whose
-- bytes begin 0x7f 0xf8, never a score of its own, first in the blob, in the order
-- given) replaced by now (`now_bytes` packed, `now_score` its number), the next ones
-- by the next doubles after now: payloads given without a score keep their order, and
-- come before those of a later call (whose now is a microsecond later at least, and
-- its script started after this one ran).  Equal payloads then keep the smaller
-- score.  Members without one come back as they are.
local function stamped(member, id, now_bytes, now_score)
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
-- enqueue that does not keep the queued one's: `queued` is its perform_in now; `max`:
-- only a later one moves it.
local function push_reschedule(id, perform_in, at, queued, max, now)
  if at == queued or (max and at < queued) then return end
  wake_if_sooner(perform_in, now)
  reschedule_queued(id, perform_in, now)
  -- A hot id that yielded to the due ids (pop.lua) now counts from its new perform_in.
  redis.call('zrem', K.due_since_zset, id)
end

-- The perform_in of each of the ids args[first..last] that is queued (false when not).
local function queued_at(args, first, last)
  return redis.call('zmscore', K.perform_in_zset, unpack(args, first, last))
end

-- Schedule the ids args[first..last] at `perform_in` (a string) that are not queued,
-- with one `ZADD NX` (`size`: add_many's), and return what queued_at would have: the
-- perform_in of each id queued before (false for a new one).  Most often every id is
-- new, and the ZADD says so by its count (no ZMSCORE).  Else the ZMSCORE after it reads
-- each id's score: an id scored other than `perform_in` was queued; of those scored
-- `perform_in`, as many as were queued with that perform_in (the ids not added, less
-- those scored otherwise) are told apart by their lex members, which no new id has yet.
-- Call only when the ids go to no group index (wake_if_sooner first: it reads the head).
local function schedule_new(args, first, last, perform_in, size)
  local schedule_args = {}
  for j = first, last do
    local at = 2 * (j - first)
    schedule_args[at + 1] = perform_in
    schedule_args[at + 2] = args[j]
  end
  local queued = last - first + 1 - add_many('zadd', K.perform_in_zset, schedule_args, size, 1, 'nx')
  if queued == 0 then return NONE_KNOWN end
  local known = queued_at(args, first, last)
  local at = tonumber(perform_in)
  local alike = {}
  for n = 1, #known do
    if tonumber(known[n]) == at then
      alike[#alike + 1] = n
    else
      queued = queued - 1
    end
  end
  for _, n in ipairs(alike) do
    if queued == 0 or not find_queued(args[first + n - 1]) then
      known[n] = false
    else
      queued = queued - 1
    end
  end
  return known
end

-- An id may not change its group while queued: a job naming a group other than its
-- queued id's refuses the whole push (`args`: push.lua's ARGV), before anything is
-- written.  Returns the error reply (nil: none), and queued_at of each chunk (by its
-- first argument) read (nil: none), which the push reuses (ids are unique within a call,
-- so writing one chunk changes nothing another read).
local function push_check_groups(args)
  local known_of_chunk = nil
  local i = 3
  while i <= #args do
    local group, count = args[i + 1], tonumber(args[i + 3])
    local last = i + 3 + count
    if group ~= '' then
      -- Many ids (worth a call): nothing queued, nothing to check.
      if count >= BULK_PAIRS and redis.call('zcard', K.perform_in_zset) == 0 then
        return nil, known_of_chunk
      end
      for first = i + 4, last, PUSH_CHUNK do
        local known = queued_at(args, first, math.min(first + PUSH_CHUNK - 1, last))
        known_of_chunk = known_of_chunk or {}
        known_of_chunk[first] = known
        for n = 1, #known do
          if known[n] then
            local id = args[first + n - 1]
            local queued = groups().group_of(id)
            if queued ~= group then
              return redis.error_reply('GROUP ' .. #id .. ' ' .. id .. queued), nil
            end
          end
        end
      end
    end
    i = last + count + 1
  end
  return nil, known_of_chunk
end
