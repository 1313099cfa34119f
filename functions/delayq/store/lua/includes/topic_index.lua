-- The partition's index of its topics (keys.py TOPIC_INDEX_KEYS), kept by every script that adds to
-- or removes from a topic's delayed set, ready list or receipts, so that the sweeper and the
-- consumer find the topics with something due without visiting the others (leases need no index:
-- the partition keeps them all in one set, leases.lua):
--   _delayed  topic -> the earliest run-at in its delayed set (ms)
--   _ready    topic -> when its ready list last went from empty to holding jobs (ms)
--   _receipts topic -> when its first receipt of a done job expires (ms; receipts.lua)
-- A topic's score is never later than its first job's: an addition lowers it (ZADD LT), and a
-- removal may leave it early until the next sweep or take of the topic sets it from the topic's own
-- keys (index_*_exact), which costs one look at the topic, never a missed job. A topic that holds
-- nothing there is absent; but a known topic whose delayed set empties stays in _delayed, scored
-- +inf (never due), until it is forgotten (forget_topic_if_empty): its next job then finds it there
-- and need not add it to _topics again (create.lua), the common case of jobs alone in their topics.

-- @include time
-- @include leases

-- A call of many topics (take.lua: a lane per topic) batches the index writes that answer nothing
-- (index_batch): each is kept, one per index and topic, and all are made at the call's end
-- (index_flush), one ZADD, ZADD LT and ZREM per index for all its topics instead of one command per
-- topic and write. A second write of a topic combines with the first (an exact score or a removal
-- wins, LT keeps the lower); a write that must answer (index_delayed) first makes what waits for its
-- topic, and a removal of the topic (forget_topic_if_empty) drops it, so each index ends as it would
-- have without the batch. The ready index is never batched. Outside a batch, each write is made at
-- once.
local batch = nil  -- index key -> topic -> {kind ('set', 'lt' or 'rem'), score}

local function index_batch()
  batch = {}
end

local function write_now(index, name, kind, score)
  if kind == 'rem' then
    redis.call('ZREM', index, name)
  elseif kind == 'never' then
    redis.call('ZADD', index, 'XX', 'inf', name)  -- only a topic there: one absent is not known
  elseif kind == 'lt' then
    redis.call('ZADD', index, 'LT', score, name)
  else
    redis.call('ZADD', index, score, name)
  end
end

local function index_write(index, name, kind, score)
  if batch == nil then
    write_now(index, name, kind, score)
    return
  end
  local waiting = batch[index]
  if waiting == nil then
    waiting = {}
    batch[index] = waiting
  end
  local before = waiting[name]
  if kind == 'lt' and before then  -- after a removal, an LT adds; after a score, it keeps the lower
    if before[1] == 'rem' or before[1] == 'never' then
      kind = 'set'
    else
      kind, score = before[1], math.min(before[2], score)
    end
  end
  waiting[name] = {kind, score}
end

-- Makes now what waits in the batch for the topic `name` in `index`.
local function index_settle(index, name)
  local waiting = batch and batch[index]
  if waiting and waiting[name] then
    write_now(index, name, waiting[name][1], waiting[name][2])
    waiting[name] = nil
  end
end

-- Makes the batch's writes, a command per index and kind, and ends the batch.
local function index_flush()
  for index, waiting in pairs(batch or {}) do
    local scored, lower, gone, never = {}, {}, {}, {}
    for name, write in pairs(waiting) do
      if write[1] == 'rem' then
        gone[#gone + 1] = name
      elseif write[1] == 'never' then
        never[#never + 1], never[#never + 2] = 'inf', name
      else
        local into = write[1] == 'set' and scored or lower
        into[#into + 1], into[#into + 2] = write[2], name
      end
    end
    if #scored > 0 then
      redis.call('ZADD', index, unpack(scored))
    end
    if #lower > 0 then
      redis.call('ZADD', index, 'LT', unpack(lower))
    end
    if #gone > 0 then
      redis.call('ZREM', index, unpack(gone))
    end
    if #never > 0 then
      redis.call('ZADD', index, 'XX', unpack(never))
    end
  end
  batch = nil
end

-- The score of the first member of a sorted set, or nil.
local function first_score(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then
    return tonumber(first[2])
  end
  return nil
end

-- A job of the topic falls due at `at` (ms): the index says so unless it knows an earlier one.
-- True if the topic was not in it.
local function index_delayed(K, at)
  index_settle(K.delayed_index, K.name)
  return redis.call('ZADD', K.delayed_index, 'LT', at, K.name) == 1
end

-- A receipt of the topic expires at `at` (ms).
local function index_receipts(K, at)
  index_write(K.receipts_index, K.name, 'lt', at)
end

-- The topic is known to the delayed index: scored never (+inf) if it was not there. True if it was
-- not: a topic new to the index (create.lua adds it to _topics then).
local function index_known(K)
  index_settle(K.delayed_index, K.name)
  return redis.call('ZADD', K.delayed_index, 'NX', 'inf', K.name) == 1
end

-- The topic's ready list holds jobs (since `now`, if it was empty). True if the topic was not in it.
local function index_ready(K, now)
  return redis.call('ZADD', K.ready_index, 'NX', now, K.name) == 1
end

-- Sets `index`'s score of the topic to `at`, the first score of its sorted set; nil: the set is
-- empty, and the topic leaves the index (the delayed index: scored never, see above).
local function index_at(K, index, at)
  if at then
    index_write(index, K.name, 'set', at)
  else
    index_write(index, K.name, index == K.delayed_index and 'never' or 'rem')
  end
end

-- index_at with the first score of the sorted set `key`, read; returns it.
local function index_exact(K, index, key)
  local at = first_score(key)
  index_at(K, index, at)
  return at
end

local function index_delayed_at(K, at)
  index_at(K, K.delayed_index, at)
end

local function index_delayed_exact(K)
  return index_exact(K, K.delayed_index, K.delayed)
end

-- A topic that holds nothing any more (no job in any state, no receipt, an empty ready list), is
-- not paused and has no key with settings or a hold leaves the partition's _topics and its index, and its control hash goes too unless its
-- rate bucket is still refilling or a take of it was undone in the last day (untake.lua): a topic name
-- used once costs nothing once its jobs are gone.
local function forget_topic_if_empty(K)
  -- A job is in one of these in every state (leased: in the partition's leases), and a ready list or
  -- a done list of holes alone still has positions to keep.
  if redis.call('EXISTS', K.delayed, K.ready, K.fair, K.parked, K.dead, K.done) > 0 or lease_count(K) > 0 then
    return
  end
  local control = redis.call('HMGET', K.control, 'paused', 'rate_at', 'untaken', 'flows', 'held')
  if control[1] or control[4] or (control[5] and redis.call('ZCARD', K.held) > 0) then
    return  -- paused, or keys with settings or holds (flow.lua): what the next jobs must find
  end
  redis.call('SREM', K.topics, K.name)
  for _, index in ipairs({K.delayed_index, K.ready_index, K.receipts_index}) do
    if batch and batch[index] then
      batch[index][K.name] = nil  -- the removal below is what it comes to
    end
    redis.call('ZREM', index, K.name)  -- early entries: a topic in the index is in _topics (create.lua)
  end
  local now, now_us = now_ms_us()
  local refilling = control[2] and tonumber(control[2]) > now_us
  local undone = control[3] and tonumber(control[3]) > now  -- a late take must still find its record
  if not refilling and not undone then
    redis.call('DEL', K.control)
  end
end
