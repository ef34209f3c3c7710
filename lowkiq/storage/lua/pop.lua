-- pop: move up to `limit` due jobs of one shard into its processing area.
-- KEYS[1]  the shard's prefix
-- KEYS[2]  optional: the prefix of a shard whose finished batch to ack first
--          (so a thread acks its last batch and pops the next in one round
--          trip); on a Redis Cluster only the shard itself (one slot); '' for none
-- KEYS[3]  optional, one server only: the worker's rate-limit bucket
-- ARGV[1]  lease token of the shard
-- ARGV[2]  now: '' for Redis's clock (a test may fix it)
-- ARGV[3]  limit (batch size)
-- ARGV[4]  lease token of the KEYS[2] shard (ARGV[4] and ARGV[5] are left out by a pop
--          that acks nothing and gives nothing after them: an idle shard's)
-- ARGV[5]  the batch of the KEYS[2] shard to ack: the number its pop returned; then
--          'w' when it holds workflow members, which are done (see wf_copy_area; only
--          when KEYS[2] is the shard itself)
-- ARGV[6]  optional: batches to pop at most (default 1): up to ARGV[3] jobs each,
--          each batch's hot ids giving it at most BATCH_PAYLOADS payloads (the
--          caller performs them one batch at a time); first, so that a pop of many
--          batches without a rate limit or weights sends no argument more
-- ARGV[7]  optional: the worker's rate limit, tokens per ms (one token per job)
-- ARGV[8]  its bucket's capacity (burst), ARGV[9] tokens to reserve at a time,
-- ARGV[10] tokens reserved by rate_take for this pop (Redis Cluster), or 0
-- ARGV[11] the grid (ms) reservations that wait for the refill are paid on, or 0
-- ARGV[12..] optional (ARGV[6..11] then given, '' when unused): pairs group, weight
--          (Worker.group_weights; a group not named weighs 1); first a NUL
--          (Worker.group_concurrency, a per-group rate limit): a group of weight 0
--          (the default one: '') is at its cap or out of tokens and gives no job, and
--          the reply counts the jobs popped of each group
-- Reads/writes: lease (of both shards), perform_in_zset, due_since_zset, fresh/retry lex
--   zsets, retry_count_zset, errors_hash, payloads_zset(id) of hot ids,
--   processing_hash (of both shards), processed_counter (of the acked shard),
--   with a rate limit rate_budget_hash and the bucket (see _common.lua)
-- Returns: -1 alone when no ack was asked and the shard holds no job (an idle shard's
--   pop: a number costs Redis some 5 k instructions less to send than a list); else a
--   flat list: the ack's result (jobs acked; -1 when its lease is not
--   held, so nothing was acked; -2 when no ack was asked; -3 when the area holds
--   another batch than the one named, so nothing was acked), the pop's status
--   (1 popped; 2 popped one job alone, whose process died running it before (a
--   suspect, see restore_processing); 0 the processing area is still occupied by a batch not yet
--   acked, failed or restored; -1 the lease is not held; -2 a reshard holds
--   the shard: it is new and waits for its old shards, or retired; -3 the rate
--   limit gives no token now, nothing was popped), ms to wait before the next
--   pop of the shard (0 without a rate limit; -1: reserve tokens with rate_take
--   first), the number of the batch popped (0: none; -1: none, and the shard holds no
--   job at all), then (after a NUL of ARGV[12], or from a shard holding jobs of a
--   group) a list: empty when no job was taken, else the group of each job taken (the
--   default group ''), in pop order, joined by NULs, or the shard's base group alone
--   when every job is of it; then the id and the processing-area value (see
--   processing_pack: perform_in, retry_count, error, blob) of each popped job,
--   earliest perform_in first; in a shard holding jobs of groups, due jobs are taken in
--   turn across groups (see _common.lua), earliest perform_in first inside a group.
--   Hot ids give at most BATCH_PAYLOADS payloads to a batch, smallest scores
--   first; the rest stay queued and due, behind the ids already due: the id's
--   perform_in becomes now (and now again when its batch is acked by the shard's
--   next pop), and due_since_zset keeps when it first became due (the lag counts
--   from it) until the id leaves the queue.
-- early {
-- Most pops of an idle process find their shard empty: with no ack asked and no rate
-- limit, the lease is checked, then one EXISTS finds no queued job, no batch in the
-- processing area, no reshard hold and no base group, and the pop ends (no TIME),
-- replying -1: "the shard holds no job" (the caller asks no due time until a wake-up).
-- (By EVALSHA these lines run before the key table and the helpers are made.)
local lease_checked = false
if (KEYS[2] or '') == '' and tonumber(ARGV[7] or '') == nil then
  if redis.call('get', K.lease) ~= ARGV[1] then return {-2, -1, 0, 0} end
  if redis.call('exists', K.perform_in_zset, K.processing_hash, K.hold, K.group_base) == 0 then
    return -1
  end
  lease_checked = true
end
-- } early
local token, now, batch_size = ARGV[1], clock(ARGV[2]), tonumber(ARGV[3])
local batches = tonumber(ARGV[6] or '') or 1
local limit = batch_size * batches
-- The groups' turns read at once (see pop_extra): as many as the pop may serve.
local turns_span = math.max(limit, 2)
-- ARGV[3] as it came, when it is the limit: Redis formats a number argument with
-- snprintf, and takes a string as it is.
local limit_arg = limit
if batches == 1 and not string.find(ARGV[3], '.', 1, true) then limit_arg = ARGV[3] end
-- Worker.group_concurrency: the pop skips the groups at their cap, and names the groups
-- of the jobs it takes.
local capping = ARGV[12] == '\0'
local ack_prefix = KEYS[2]
if ack_prefix == '' then ack_prefix = nil end
local acked = -2
local held = lease_checked or nil
local same = ack_prefix == P
local processing = K.processing_hash
-- How many of the shard's hold, errors, restores and group turns and waits exist (and,
-- unless the pop acks the shard itself, its processing area), asked in one EXISTS: most
-- shards have none of them, and then no other key is asked about.  Asked before the ack of the shard
-- itself, which then skips its own EXISTS; the ack may only delete the restores, so
-- a count taken before it can only make the pop look for restores that are gone.
local extra = nil
-- With Worker.track, the ids of the shard's own batch acked above, whose `done` event
-- is recorded by track_done(popped) in one entry with the ids the pop takes, if any.
local done_ids, track_done = nil, nil
if TRACK then
  track_done = function(popped)
    if popped then
      track(K, 'done', done_ids, 'fence', token, 'popped', popped)
    else
      track(K, 'done', done_ids, 'fence', token)
    end
    done_ids = nil
  end
end
if ack_prefix then
  acked = -1
  local A = same and K or keys_at(ack_prefix)
  local ack_batch = ARGV[5]
  local noting = string.byte(ack_batch, -1) == 119  -- 'w'
  if noting then ack_batch = string.sub(ack_batch, 1, -2) end
  local ack_held, in_area = lease_and_batch(A, ARGV[4], ack_batch)
  if ack_held and not in_area then
    acked = -3
    -- The area holds a batch this ack does not name: left for the caller to restore.
    if same and redis.call('exists', processing) == 1 then return {acked, 0, 0, 0} end
  elseif ack_held then
    local restores = nil
    if same then
      extra = pop_extra(turns_span, K.hold, K.errors_hash, K.restores_hash, K.due_since_zset)
      if extra > 0 and redis.call('exists', K.due_since_zset) == 1 then
        extra = extra - 1
        requeue_yielded(processing, now)
      end
      if extra == 0 then restores = false end
    end
    if noting and same then wf_copy_area(K, ack_batch) end
    -- A thread usually acks the shard it pops: its lease was just checked.
    if same and ARGV[4] == token then held = true end
    if TRACK and held then
      -- The batch's `done` goes in one entry with what this pop takes (see below).
      acked, done_ids = ack_processing(A, restores, false)
    else
      acked = ack_processing(A, restores, ARGV[4])
    end
  end
end
if not held and not lease_held(K, token) then return {acked, -1, 0, 0} end
if not same then
  extra = pop_extra(turns_span, K.hold, K.errors_hash, K.restores_hash, processing)
elseif extra == nil then
  extra = pop_extra(turns_span, K.hold, K.errors_hash, K.restores_hash)
end
if extra > 0 then
  if redis.call('exists', K.hold) == 1 then
    if done_ids then track_done() end
    return {acked, -2, 0, 0}
  end
  if not same and redis.call('exists', processing) == 1 then return {acked, 0, 0, 0} end
end
-- The due jobs: in a shard with groups, picker() -> id, perform_in and group of the
-- next (nil: none left), unpick(group) when the pop does not take the job it just
-- gave, finish() to write what the choice changed (see group_picker); else `due`,
-- the due ids by perform_in (flat id, perform_in).
local picker, unpick, finish, any_grouped_due, due
-- The base group (see _common.lua), that of every job of a shard not indexed (in an
-- indexed one, ids of every group leave K.group_of_hash: the base group's have no entry).
local base = false
if grouped_known then
  local weights = {}
  for i = capping and 13 or 12, #ARGV, 2 do weights[ARGV[i]] = tonumber(ARGV[i + 1]) end
  picker, unpick, finish, any_grouped_due = group_picker(now, limit, weights, pop_first_turn, pop_first_wait)
else
  -- A shard of one group gives nothing while that group is at its cap or out of tokens.
  base = base_group()
  local base_out = false
  if capping then
    for i = 13, #ARGV, 2 do
      if ARGV[i] == base and ARGV[i + 1] == '0' then base_out = true end
    end
  end
  due = base_out and {} or ranked(K.perform_in_zset, now, limit, limit_arg)
end
-- Rate limit: pop at most the tokens of the shard's budget (none are reserved for
-- a shard with nothing due).
local rate = tonumber(ARGV[7] or '')
-- Whether a job is due, asked by a pop with a rate limit or errors or restores (else nil).
local some_due = nil
if rate or extra > 0 then some_due = (due and #due > 0) or (not due and any_grouped_due()) end
-- Nothing due in a shard without groups: most idle pops end here.
if due and #due == 0 and not rate then
  if done_ids then track_done() end
  if capping or base ~= '' then return {acked, 1, 0, 0, {}} end
  return {acked, 1, 0, 0}
end
local R = rate and rate_limits()
local rate_args, tokens, from, now_ms
local allowance = limit
if rate and not some_due then
  R.budget_idle(KEYS[3], tonumber(ARGV[8]), tonumber(ARGV[10]))
elseif rate then
  local pace = tonumber(ARGV[11] or '') or 0
  rate_args = {tonumber(ARGV[9]), rate, tonumber(ARGV[8]), pace, KEYS[3]}
  tokens, from, now_ms = R.budget_open(rate_args[1], rate, rate_args[3], tonumber(ARGV[10]),
    KEYS[3], pace)
  if tokens <= 0 or from > now_ms then
    if done_ids then track_done() end
    if tokens <= 0 then return {acked, -3, -1, 0} end
    R.budget_keep(tokens, from, now_ms)
    return {acked, -3, math.ceil(from - now_ms), 0}
  end
  allowance = tokens
end
local out = {acked, 1, 0, 0}
-- With Worker.group_concurrency, a per-group rate limit or a paused group, and in a
-- shard holding jobs of groups, the groups of the jobs taken (see Returns): the caller
-- claims their places and tokens before the batch runs, and counts each group's waits.
-- In a shard not indexed every job is of its base group: nothing is kept per job.
local taken_groups, job_groups = nil, nil
if capping or grouped_known or base ~= '' then
  taken_groups = {}
  out[5] = taken_groups
  if grouped_known then job_groups = {} end
end
local budget = BATCH_PAYLOADS
-- Most pops find no error and no restored job (`extra` counts the errors and
-- restores hashes that exist): then no job's error or restores is read or deleted.
local any_error, any_restored = false, false
if extra > 0 and some_due then
  any_error = redis.call('exists', K.errors_hash) == 1
  any_restored = not any_error or extra == 2
end
-- The jobs' writes, made once for the whole pop after the loop (the loop reads none
-- of the keys they write): ids leaving perform_in_zset, lex members leaving the
-- fresh zset, the processing area's fields and values (the reply's pairs, from
-- out[pairs_from] on); and, made when a job needs them, lex members leaving the retry
-- zset with their ids (retry_count_zset), and ids leaving errors_hash.
local unscheduled, fresh_gone, pairs_from = {}, {}, #out + 1
local unscheduled_count, fresh_count = 0, 0  -- their lengths (no `#` a job)
local retry_gone, counts_gone, errors_gone = nil, nil, nil
-- Hot ids: those that yield (perform_in now, queued behind the due ids), with the
-- perform_in they had and their group, and those that leave (no longer yielding).
-- Ids of a group other than the base one leaving the queue leave K.group_of_hash.
local yielding, yielded_gone, grouped_gone = nil, nil, nil
local taken, alone = 0, false
local popped_ids = TRACK and {}  -- with Worker.track
local next_due = -1  -- in `due`
-- Runs of due ids (see find_in_run): the state of the pop's reads, and how many ids of
-- the current run are left (this one first); in a shard with groups, those of each group
-- (picker() says how many of the group's ids it read are due at this one's perform_in).
local run, run_left, runs = due and #due > 2 and {window = RUN_READ_FIRST} or nil, 0, not due and {}
-- Most jobs are plain: fresh (not a retry), not hot, of group '', in a pop that reads
-- no errors and keeps no per-job record (Worker.track, the groups of a shard with
-- groups).  The loop takes them in a few lines of its own, calling no helper (each call
-- a job costs Redis's Lua more than these lines do).
local plain_pop = not any_error and not TRACK and not job_groups
-- Each batch of the pop has a payload budget of its own (hot ids spend it), from
-- `taken` == batch_end on; one that runs out ends the pop.
local batch_end = batch_size
while not alone and taken < allowance do
  if taken == batch_end then budget, batch_end = BATCH_PAYLOADS, taken + batch_size end
  if budget <= 0 then break end
  local id, perform_in, group
  if due then
    next_due = next_due + 2
    id, perform_in, group = due[next_due], due[next_due + 1], base
    if run and run_left == 0 and id then
      run_left, run.read = 1, nil
      while due[next_due + 2 * run_left + 1] == perform_in do run_left = run_left + 1 end
    end
  else
    id, perform_in, group, run_left = picker()
    run = id and runs[group]
    if id and not run and run_left > 1 then
      run = {window = RUN_READ_FIRST}
      runs[group] = run
    end
    if run then
      if run.left ~= run_left then run.read = nil end  -- a new run of the group
      run.left = run_left - 1
    end
  end
  if not id then break end
  local member, is_retry
  if run then
    -- In a shard without groups the member is mostly the next one the run read
    -- (find_in_run's first look, without its call or its `id .. '\0'`).
    local read, at = due and run.read, run.at
    local next_member = read and read[at]
    if next_member and string.byte(next_member, #id + 1) == 0
        and string.sub(next_member, 1, #id) == id then
      member, is_retry = next_member, false
      run.at, run.hits = at + 1, run.hits + 1
    else
      member, is_retry = find_in_run(run, id, run_left)
    end
    run_left = run_left - 1
  else
    member, is_retry = find_queued(id)
  end
  -- A job whose process died running it (see restore_processing) runs in a batch
  -- of its own, so a job that kills its process takes no other job down with it.
  if member and any_restored and redis.call('hexists', K.restores_hash, id) == 1 then
    if taken > 0 then
      if unpick then unpick(group) end
      break
    end
    alone = true
  end
  -- Whether the id leaves the schedule: every one but a hot id that stays queued.
  local leaves = true
  if member then
    taken = taken + 1
    local blob = string.sub(member, #id + 2)  -- blob_of, without a call
    local at = pairs_from + 2 * taken
    out[at - 2] = id
    if plain_pop and not is_retry and blob ~= '' and group == '' then
      fresh_count = fresh_count + 1
      fresh_gone[fresh_count] = member
      -- processing_pack of a plain job, without a call
      if perform_in ~= plain_head_at then
        plain_head, plain_head_at = struct.pack(PROCESSING_HEADER, perform_in + 0, -1, -1), perform_in
      end
      out[at - 1] = plain_head .. blob
    else
      local retry_count = -1
      if is_retry then retry_count = tonumber(redis.call('zscore', K.retry_count_zset, id)) end
      local error = any_error and redis.call('hget', K.errors_hash, id) or nil
      if blob == '' then
        -- A hot id: it stays queued while payloads are left, behind the ids already due.
        local payloads_zset = K.payloads_zset(id)
        local count
        blob, count = zset_take(payloads_zset, budget)
        budget = budget - count
        leaves = redis.call('exists', payloads_zset) == 0
        if leaves then
          yielded_gone = yielded_gone or {}
          yielded_gone[#yielded_gone + 1] = id
          redis.call('hdel', P .. 'hot_left', id)  -- K.hot_left_hash, named only here
        else
          yielding = yielding or {}
          yielding[#yielding + 1] = {id, perform_in, group}
        end
      end
      if leaves then
        if error then
          errors_gone = errors_gone or {}
          errors_gone[#errors_gone + 1] = id
        end
        if is_retry then
          retry_gone, counts_gone = retry_gone or {}, counts_gone or {}
          retry_gone[#retry_gone + 1] = member
          counts_gone[#counts_gone + 1] = id
        else
          fresh_count = fresh_count + 1
          fresh_gone[fresh_count] = member
        end
      end
      if TRACK then popped_ids[#popped_ids + 1] = id end
      if job_groups then job_groups[taken] = group end
      out[at - 1] = processing_pack(perform_in, retry_count, error, blob, group)
    end
  end
  if leaves then
    unscheduled_count = unscheduled_count + 1
    unscheduled[unscheduled_count] = id
    if group ~= base then
      grouped_gone = grouped_gone or {}
      grouped_gone[#grouped_gone + 1] = id
    end
  end
end
local kept_idle, staying = false, nil
if finish then kept_idle, staying = finish() end
if due and not yielding and unscheduled_count > 2 then
  -- The ids leaving the schedule are its first ones: `due` read them from its first
  -- rank on, in order, and every id the loop took from it leaves (no hot id stays).
  -- (One or two leave by a ZREM of them, which costs no more.)
  redis.call('zremrangebyrank', K.perform_in_zset, '0', INTEGER_TEXT[unscheduled_count - 1])
else
  call_many('zrem', K.perform_in_zset, unscheduled)
end
-- A group kept in the turns with nothing due waits for a smaller turn: in a shard this
-- pop left with no queued job, every group is such a one, and the shard keeps no turns.
if kept_idle and redis.call('exists', K.perform_in_zset) == 0 then
  redis.call('del', K.group_turns_zset, K.group_waits_zset)
end
call_many('zrem', K.fresh_lex_zset, fresh_gone)
if retry_gone then
  call_many('zrem', K.retry_lex_zset, retry_gone)
  call_many('zrem', K.retry_count_zset, counts_gone)
end
if errors_gone then call_many('hdel', K.errors_hash, errors_gone) end
if yielded_gone then call_many('zrem', K.due_since_zset, yielded_gone) end
if grouped_gone then call_many('hdel', K.group_of_hash, grouped_gone) end
if yielding then
  local since, behind = {'NX'}, {'XX'}
  for _, job in ipairs(yielding) do
    local at = job[2]
    if tonumber(at) < tonumber(now) then
      at = now
      since[#since + 1] = job[2]
      since[#since + 1] = job[1]
      behind[#behind + 1] = now
      behind[#behind + 1] = job[1]
    end
    -- Back in its group's index (picker took it out), behind the group's due ids.
    if picker then groups().reschedule(job[1], job[3], at, now) end
  end
  if #behind > 1 then
    redis.call('zadd', K.due_since_zset, unpack(since))
    redis.call('zadd', K.perform_in_zset, unpack(behind))
  end
end
-- A shard whose queued ids are of one group again keeps no group key (checked when
-- one group of those the pop read stays in the turns).
if staying == 1 then groups().collapse() end
if taken > 0 then
  -- (The area is empty: a pop of many jobs makes it a hash table before writing them.)
  add_many('hset', processing, out, 0, pairs_from)
  out[4] = redis.call('incr', K.batch_counter)
end
-- A hot id that stays queued: how many of its payloads this batch left behind, for
-- current_batch().superseded (K.hot_left_hash, built here only when needed).
if yielding then
  for _, job in ipairs(yielding) do
    local left = redis.call('zcard', K.payloads_zset(job[1]))
    redis.call('hset', P .. 'hot_left', job[1], out[4] .. ' ' .. left)
  end
end
if TRACK then
  local popped = taken > 0 and table.concat(popped_ids, '\0') or nil
  if done_ids then
    track_done(popped)
  elseif popped then
    track(K, 'popped', popped, 'fence', token)
  end
end
if alone then out[2] = 2 end
if taken_groups and taken > 0 then
  taken_groups[1] = job_groups and table.concat(job_groups, '\0') or base
end
if rate_args then
  local backlog = redis.call('zrangebyscore', K.perform_in_zset, '-inf', now, 'limit', '0',
    '1')[1] ~= nil
  out[3] = R.budget_close(tokens - taken, from, now_ms, backlog, unpack(rate_args))
end
return out
