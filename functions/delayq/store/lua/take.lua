--[[
take: lease up to `count` due jobs of each of one or more topics of a partition (their lanes) to a
consumer, in one atomic step: a consumer's takes of one partition in a pass are one call, and so are
the acks of its other lanes there that ride with them (a lane with `count` -1 only acknowledges).

For each lane: takes the head of the ready list with LRANGE + LTRIM (never a blocking pop; take_ready in
includes/queue.lua, which drops the holes of cancelled jobs); in a topic that has jobs with flow
keys, first moves its due jobs (up to MOVE_DUE) to the ready list or the fair set and takes in fair
order, the keys in rotation (take_fair in includes/queue.lua). When that holds fewer than `count`,
due jobs straight from the delayed set, so a consumer that wakes when a job falls due finds it
without waiting for the sweeper. With its `ahead`, it also takes the jobs that fall due within that
many ms (the take ahead): a steady stream of jobs is taken a few at a time, not one call each. Behind
the turns of a backlog, the jobs falling due within it of keys with no job waiting (theirs is the
next turn) are taken first (take_soon, at most half the take): a key's trickle is started at its
run-at, not a take's interval late, however long another key's backlog. A job
taken ahead is leased from its run-at (its lease ends at run-at + its timeout + grace, as if taken
then), and the consumer starts it only once Redis' clock, as this reply gives it plus the time
passed since, reaches its run-at: never early. A topic with a rate takes nothing ahead (its bucket
counts starts when they are taken). Leases each job until now (or its run-at) + its timeout + grace.
An id whose job is gone or no longer queued is skipped; a job whose run-at is beyond the take's
horizon goes back to the delayed set, so nothing is ever handed over early; a job whose timeout is
longer than the time the consumer has left goes back where it was (the head of the ready list, or
the delayed set if not due yet), for a consumer with more time;
a job whose timeout is longer than a whole run of the consumer (ARGV[2]: no run could ever take it)
goes to the dead letters at once, as a permanent failure that says so, instead of being put back
forever.

A lane's take may carry the consumer's id for it (its `take id`): that id is then the lease token of every job it
leases (a job is leased at most once per take, so the pair stays unique), so that a take whose reply
the consumer never got (Redis hung past the socket timeout, a connection cut after the call was sent)
can be undone by untake.lua, and a take that untake.lua already undid (it reached Redis after the
untake) leases nothing. Without an id, each lease gets a number of the partition's counter.

KEYS[1]     the partition's _seq counter (lease tokens of takes without an id)
KEYS[2]     the partition's _untaken set (takes undone before they ran)
KEYS[3]     the partition's _outbox (includes/callbacks.lua; its records are numbered by KEYS[1])
KEYS[4..]   a key group per lane (keys.py Partition.key_group, KEY_GROUP_SIZE keys each); its control
            hash says whether the topic is paused; the take keeps the partition's topic index
            (topic_index.lua)
ARGV[1]     the longest timeout in ms the consumer can still finish; -1: no limit
ARGV[2]     the longest timeout in ms a whole run of the consumer can finish (its deadline minus its
            start); -1: no limit
ARGV[3]     how many pools follow: a pool is the jobs some lanes may bring in all (the free workers
            they share), each lane taking from what the lanes before it left
then per lane, LANE_ARGS values and its acks:
  count       jobs to take, at most; -1: none, the lane's acks alone (as ack.lua)
  pool        which pool its jobs come out of (1, 2, ...); 0: none
  timeout     the topic's timeout in ms, for jobs without their own
  grace       lease grace in ms, added to the timeout
  take id     the lease token of its jobs; '' none
  rate        the topic's rate limit here, its interval and tolerance in µs, 2 values
              (includes/rate.lua): the take leases no more jobs than the bucket holds starts, the
              others stay ready in place; '' '' none
  keeping     the topic's keep_done in ms and keep_done_max, for the acks, 2 values
  ahead       the take ahead in ms: jobs due by now + this are taken too (0: only the due)
  key limits  every flow key's limits here (core/flows.py KeyLimits.shares, a key's own settings
              win): concurrency, rate interval and tolerance in µs, 3 values; '' where none. A topic
              whose keys have limits takes every due job in turn (so that each is admitted or
              parked, flow.lua) and nothing ahead
  callbacks   the topic's on_done and on_dead ('' none), 2 values: a job acknowledged, or sent to
              the dead letters here, leaves a record in the outbox for that topic
  acks        how many values follow: 4 per job acknowledged first (includes/ack.lua: the
              consumer's acks of the topic ride with its take): id, lease token, started_at_ms,
              result
Returns a reply per lane, in their order, each
        {now_ms, next_in_ms, dead, acked, held, then 9 values per leased job:
         id, body, attempt, run_at_ms, enqueued_at_ms, lease_token, timeout_ms, key ('' for none),
         start_ms (when it may start: now, its run-at if taken ahead, its key's slot if paced),
         then the ids of the dead}
  next_in_ms  ms until the topic's next delayed job falls due, -1 if none; 0 also when a full take
              took jobs ahead of due ones waiting their turns; -2: the topic is paused
              (pause.lua), nothing was taken, and the reply ends after `held`. When the rate cut
              the take short, at most the ms until the bucket holds a start again
  dead        how many jobs went to the dead letters for a timeout longer than ARGV[2]; their ids
              are the last `dead` values of the reply
  acked       how many of the jobs to acknowledge were
  held        1 if the rate cut the take short (jobs due stay ready until `next_in_ms`), else 0
calls.py takes() packs these arguments and reads the replies.
]]
-- @include meta
-- @include time
-- @include topic_keys
-- @include queue
-- @include rate
-- @include ack
-- @include history
-- @include callbacks
-- @include jobs

local MOVE_DUE = 1000  -- due jobs a take of a topic with flow keys moves to the fair set first, at most

local SEQ, UNTAKEN, FIRST_GROUP = KEYS[1], KEYS[2], 4
local LANE_ARGS = 16  -- ARGV values of a lane before its acks
local O = outbox_of(SEQ, KEYS[3])
local now, now_us = now_ms_us()
local longest = tonumber(ARGV[1])
local run_limit = tonumber(ARGV[2])
local pools = {}
for i = 1, tonumber(ARGV[3]) do
  pools[i] = tonumber(ARGV[3 + i])
end

-- One lane: the topic of key group K, its arguments from ARGV[a], its acks up to ARGV[last].
-- `listed`: whether its topic is in the ready index (nil: not asked, its ready list is read).
local function take_lane(K, a, last, listed)
  local count = tonumber(ARGV[a])
  local pool = tonumber(ARGV[a + 1])
  local keep_ms = tonumber(ARGV[a + 7])
  if count < 0 then  -- acks alone, as ack.lua does them
    local acked = ack_jobs(K, now, keep_ms, tonumber(ARGV[a + 8]), a + LANE_ARGS, last, true, O, ARGV[a + 13])
    return {now, -1, 0, acked, 0}
  end
  local take_id = ARGV[a + 4]
  if take_id == '' then
    take_id = nil
  end
  -- The acks first: their workers are the ones this take fills.
  local acked = ack_jobs(K, now, keep_ms, tonumber(ARGV[a + 8]), a + LANE_ARGS, last, false, O, ARGV[a + 13])
  -- What the lanes before it left: it holds that from the lanes after it (which may take their turns
  -- while it waits for its reads, jobs.lua), then the jobs it chose, until it knows how many it leased.
  local holding = 0
  if pool > 0 then
    count = math.min(count, pools[pool])
    holding, pools[pool] = count, pools[pool] - count
  end
  local out = {now, -1, 0, acked, 0}  -- dead and held are set at the end; the dead ids follow the jobs
  -- The topic's control, in one read: paused, until when takes of it may have been undone
  -- (untake.lua), its rate bucket.
  local control = redis.call(
    'HMGET', K.control, 'paused', 'untaken', 'rate_at', 'keyed', 'fair', 'flows', 'held', 'busy', 'parked'
  )
  local keyed, waiting_turns = control[4] ~= false, control[5] ~= false
  if take_id and control[2] then
    if redis.call('ZREM', UNTAKEN, take_id) == 1 then
      count = 0  -- undone before it ran: its consumer has given up on it
    elseif tonumber(control[2]) < now then
      redis.call('HDEL', K.control, 'untaken')  -- the undone takes' records are gone by now
    end
  end
  -- Paused: nothing is taken (the sweep still moves due jobs to the ready list); the consumer backs
  -- off this lane for a tick.
  if control[1] then
    if pool > 0 then
      pools[pool] = pools[pool] + holding
    end
    return {now, -2, 0, acked, 0}
  end
  -- Rate-limited: no more jobs than the bucket holds starts; the rest stay where they are. Nothing is
  -- taken ahead: the bucket counts a start when its job is taken.
  local bucket, held = nil, false
  local horizon = now + tonumber(ARGV[a + 9])  -- jobs due by then are taken
  if ARGV[a + 5] ~= '' then
    horizon = now
    bucket = rate_bucket(K.control, tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), now_us, control[3])
    if bucket.allowed < count then
      count, held = bucket.allowed, true
    end
  end
  -- The flow keys' limits, if any can apply: then every due job is taken in turn, admitted or parked.
  local limits = nil
  if keyed then
    local defaults = {
      concurrency = tonumber(ARGV[a + 10]), interval = tonumber(ARGV[a + 11]), tolerance = tonumber(ARGV[a + 12])
    }
    local flows = {flows = control[6], held = control[7], busy = control[8], parked = control[9]}
    limits = flow_open(K, flows, defaults, now, now_us)
    if limits then
      horizon = now
    end
  end
  local dead = {}
  local ids, turns = {}, nil
  local started = 0  -- jobs leased: the starts the rate's bucket spends
  local moved = 0
  -- Fair among every due job of a topic with flow keys: those due wait their turn in the fair set (or
  -- the ready list, without a key) unless all of them fit in this take.
  local function take_in_turn(due)
    if #due > 0 then
      moved = moved + #due
      push_ready(K, due, now)
    end
    local more = take_due(K, now, MOVE_DUE)
    if #more > 0 then
      moved = moved + #more
      push_ready(K, more, now)
    end
    if limits then
      flow_unpark(limits, count - #ids, function(_, back, keys)
        push_ready_head(K, back, now, keys)
      end)
    end
    local taken
    taken, turns = take_fair(K, count - #ids, limits)
    for _, id in ipairs(taken) do
      ids[#ids + 1] = id
    end
  end

  local soon = 0  -- jobs taken ahead of the turns
  if count > 0 and (waiting_turns or limits) then
    if horizon > now then
      -- A key with no job waiting has the next turn: its jobs falling due within the take ahead are
      -- taken now, as a topic without keys takes them, rather than a take's interval late behind the
      -- turns of a backlog. At most half the take: the workers they hold wait for their run-at.
      ids = take_soon(K, now, horizon, math.ceil(count / 2))
      soon = #ids
    end
    take_in_turn({})  -- jobs with keys are waiting their turn: those falling due join them first
  elseif count > 0 then
    if listed ~= false then
      ids = take_ready(K, count)
    end
    if keyed and #ids < count then
      -- Due jobs the sweeper has not moved: all taken now if they fit; else a burst, taken in turn.
      local due = take_due(K, now, count - #ids + 1)
      if #due <= count - #ids then
        moved = #due
        for _, id in ipairs(due) do
          ids[#ids + 1] = id
        end
      else
        take_in_turn(due)
      end
    end
  end
  -- The delayed set's first run-at, once known: when read with the jobs taken from it, and the
  -- earliest of those put back (`delayed_known` then).
  local from_delayed, delayed_known, delayed_first = 0, false, nil
  local function delay_back(id, run_at)
    delay(K, id, run_at)
    if delayed_known and (not delayed_first or run_at < delayed_first) then
      delayed_first = run_at
    end
  end
  if #ids < count and not limits then
    -- The ready list is short: due jobs the sweeper has not moved yet are taken straight from the
    -- delayed set, earliest first, after the ready ones (they fell due later).
    local due
    due, delayed_first = pop_due(K, horizon, count - #ids)
    delayed_known = true
    for _, id in ipairs(due) do
      ids[#ids + 1] = id
    end
    from_delayed = #due
  end
  if #ids > 0 then
    -- Each lease's token: the take's id, else the next number of the partition's counter.
    local token = take_id
    local seq = not take_id and redis.call('INCRBY', SEQ, #ids) - #ids
    if pool > 0 then
      pools[pool] = pools[pool] + holding - #ids
      holding = #ids
    end
    local metas, bodies = jobs_get(K, ids)
    local leases, updates, put_back, keys, put_back_keys, leased_keys = {}, {}, {}, {}, {}, {}
    local topic_timeout, grace = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    for i, id in ipairs(ids) do
      -- Only a queued job is taken: its meta is 'q|attempts|run_at|enqueued_at||overrides'. Matched as
      -- text rather than decoded (meta.lua): the hot path of every delivery.
      local attempts, run_at, enqueued_at, overrides
      if metas[i] then
        attempts, run_at, enqueued_at, overrides = string.match(metas[i], QUEUED_META)
      end
      if attempts then
        local timeout, key = topic_timeout, ''
        if overrides ~= '||' then  -- retries|timeout|backoff[|key], all empty unless the job has its own
          local own = string.match(overrides, '^[^|]*|(%d+)|')
          if own then
            timeout = tonumber(own)
          end
          key = overrides_key(overrides)
        end
        keys[i] = key
        local due_at = tonumber(run_at)
        -- When its attempt starts: now, its run-at if taken ahead, or its key's slot (flow.lua)
        local from = math.max(now, due_at, limits and limits.starts[id] or now)
        if due_at > horizon then
          delay_back(id, due_at)
        elseif run_limit >= 0 and timeout > run_limit then
          -- No run of this consumer could ever take it: a permanent failure, not a job put back forever.
          dead[#dead + 1] = id
          updates[#updates + 1] = id
          updates[#updates + 1] = DEAD .. '|' .. attempts .. '|' .. run_at .. '|' .. enqueued_at .. '||' .. overrides
          redis.call('ZADD', K.dead, now, id)
          local err = string.format(
            'timeout %gs is longer than a consume run can last (%ds): enqueue it again with a shorter'
            .. ' timeout, or raise the consume function\'s timeout', timeout / 1000, math.floor(run_limit / 1000))
          history_add(K, id, attempts + 1, '', now, 'error', err)
          if ARGV[a + 14] ~= '' then
            callback_add(O, ARGV[a + 14], K, id, key, attempts, 'dead', '', now, bodies[i], err)
          end
        elseif longest >= 0 and timeout + from - now > longest then
          if due_at > now then
            delay_back(id, due_at)
          else
            put_back[#put_back + 1] = id
            put_back_keys[#put_back_keys + 1] = key
          end
        else
          if seq then
            seq = seq + 1
            token = tostring(seq)
          end
          attempts = attempts + 1
          if key ~= '' then
            leased_keys[key] = (leased_keys[key] or 0) + 1
          end
          local n = #leases
          leases[n + 1], leases[n + 2] = from + timeout + grace, id
          n = #updates
          updates[n + 1] = id
          updates[n + 2] = RESERVED .. '|' .. attempts .. '|' .. run_at .. '|' .. enqueued_at .. '|' .. token .. '|' .. overrides
          n = #out
          out[n + 1], out[n + 2], out[n + 3], out[n + 4] = id, bodies[i], attempts, run_at
          out[n + 5], out[n + 6], out[n + 7], out[n + 8], out[n + 9] = enqueued_at, token, timeout, key, from
        end
      end
    end
    started = #leases / 2
    lease_add(K, leases)
    if #updates > 0 then
      metas_set(K, updates)
    end
    if #put_back > 0 then
      push_ready_head(K, put_back, now, keyed and put_back_keys)
    end
    if turns then
      forget_turns(K, ids, keys, turns)
    end
    if limits then
      flow_commit(limits, leased_keys)
    end
  end

  if pool > 0 then
    pools[pool] = pools[pool] + holding - started
  end
  if acked > 0 and keep_ms == 0 then
    forget_topic_if_empty(K)
  end

  local next_at
  local delayed_changed = from_delayed > 0 or moved > 0 or soon > 0  -- the index's entry may be early
  if delayed_known then
    next_at = delayed_first
    if delayed_changed then
      index_delayed_at(K, next_at)
    end
  elseif delayed_changed then
    next_at = index_delayed_exact(K)
  else
    next_at = first_score(K.delayed)
  end
  if soon > 0 and #ids >= count then
    next_at = now  -- jobs due may wait their turns still: the consumer takes again once it has workers
  end
  if limits then  -- a key parked until a time: its jobs are due again then
    local woken = first_score(K.wake)
    if woken and woken ~= math.huge and (not next_at or woken < next_at) then
      next_at = woken
    end
  end
  if next_at then
    out[2] = math.max(0, next_at - now)
  end
  if bucket then
    rate_spend(bucket, started)
    if held then
      out[5] = 1
      local wait = rate_wait_ms(bucket)
      if out[2] < 0 or wait < out[2] then
        out[2] = wait
      end
    end
  end
  out[3] = #dead
  for i = 1, #dead do
    out[#out + 1] = dead[i]
  end
  return out
end

local lanes, taking = {}, {}
local a = 4 + #pools
for g = 1, (#KEYS - FIRST_GROUP + 1) / KEY_GROUP_SIZE do
  local last = a + LANE_ARGS - 1 + tonumber(ARGV[a + LANE_ARGS - 1])
  lanes[g] = {K = topic_keys(FIRST_GROUP + (g - 1) * KEY_GROUP_SIZE), a = a, last = last}
  if tonumber(ARGV[a]) > 0 then
    taking[#taking + 1] = lanes[g]
  end
  a = last + 1
end
-- Which of the taking lanes' topics have ready jobs: with several, one read of the ready index for
-- all instead of a read of each one's ready list (jobs alone in their topics come from the delayed
-- set, their ready lists empty).
if #taking > 1 then
  local names = {}
  for i, lane in ipairs(taking) do
    names[i] = lane.K.name
  end
  for i, since in ipairs(redis.call('ZMSCORE', taking[1].K.ready_index, unpack(names))) do
    taking[i].listed = since ~= false
  end
end
index_batch()  -- the lanes' index writes, a command per index for all of them (topic_index.lua)
lease_batch()  -- and their leases, a command per lease set (leases.lua)
local replies
if #lanes == 1 then  -- its reads and writes of jobs are its own: made as they come
  replies = {take_lane(lanes[1].K, lanes[1].a, lanes[1].last, lanes[1].listed)}
else
  jobs_batch()  -- the lanes' reads and writes of jobs, a command per hash for all of them (jobs.lua)
  replies = jobs_each(lanes, function(lane)
    return take_lane(lane.K, lane.a, lane.last, lane.listed)
  end)
  jobs_flush()
end
leases_flush()
index_flush()
outbox_flush(O)
return replies
