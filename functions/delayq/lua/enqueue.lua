--[[
enqueue: create or replace jobs of one partition, all in one atomic step.

KEYS[1]         the partition's _topics set
KEYS[2 ...]     a key group per topic named in ARGV (keys.py Partition.key_group: its keys, and the
                partition's topic index, which learns when each topic next has work)
ARGV[1]         G, the number of topic groups
ARGV[2]         mode: 'c' create, refusing an existing job; 'r' create or replace
ARGV[3 .. G+2]  the topic names, in the order of their key groups
then one line per job, 'group|at|overrides|id|body':
  group         1-based index of the job's topic group
  at            'd<ms>': a delay in ms from now; 'a<ms>': epoch ms (the past means now)
  overrides     'retries|timeout_ms|backoff_csv', the per-job overrides as the meta stores them,
                each '' for the topic's ('||' for none)
  id            (no '|' in an id)
  body          JSON, the rest of the line
Returns a flat array, two values per job: code, run_at_ms
  code   1 created (a replace of a done job's receipt creates it anew), 2 replaced, -1 exists (create
         of an existing job, or of one whose receipt is kept: a dedupe window), -3 reserved (replace
         of a leased job); run_at_ms is 0 when the job was refused

A single create (the common call: one job, refused if it exists) goes its own short way, no table
of gathered writes made: at a steady low rate each call finds Redis' CPU cold, and what the script
does then is most of a job's cost. It checks and writes its meta in one HSETNX. Other creates are
gathered and written with one command per key (HSET, ZADD, RPUSH of many): the per-call cost, not the
per-job one, dominates a batch. A replace (PUT: one job per call) first writes what is gathered, then
reads the job's current state. A topic joins the partition's _topics when the call makes it known to
the topic index (a topic in the index is in _topics: forget_topic_if_empty takes it out of both).
]]
-- @include time
-- @include topic_keys
-- @include meta
-- @include queue
-- @include receipts

local now = now_ms()
local now_text = tostring(now)
local groups = tonumber(ARGV[1])
local mode = ARGV[2]
local first_job = groups + 3
local LINE = '^(%d+)|([^|]*)|([^|]*|[^|]*|[^|]*)|([^|]*)|(.*)$'

-- A job's run-at from its line's 'd<ms>' or 'a<ms>', as a number and as text.
local function run_at_of(at)
  local run_at_text = string.sub(at, 2)
  local run_at = tonumber(run_at_text)
  if string.byte(at) == 100 then -- 'd': a delay
    run_at = now + run_at
    return run_at, tostring(run_at)
  elseif run_at < now then
    return now, now_text
  end
  return run_at, run_at_text
end

-- The meta of a job created now.
local function new_meta(run_at_text, overrides)
  return 'q|0|' .. run_at_text .. '|' .. now_text .. '||' .. overrides
end

-- Queues a topic's new jobs: `delayed` (run-at, id pairs; `first` the earliest run-at) and `ready`
-- (ids due now); the topic joins _topics if the index did not know it.
local function place(K, delayed, first, ready)
  local new_in_index = false
  if #delayed > 0 then
    redis.call('ZADD', K.delayed, unpack(delayed))
    new_in_index = index_delayed(K, first)
  end
  if #ready > 0 then
    new_in_index = push_ready(K, ready, now) or new_in_index
  end
  if new_in_index then
    redis.call('SADD', KEYS[1], K.name)
  end
end

if mode == 'c' and #ARGV == first_job then
  local K = topic_keys(2)
  local _, at, overrides, id, body = string.match(ARGV[first_job], LINE)
  local run_at, run_at_text = run_at_of(at)
  if redis.call('HSETNX', K.meta, id, new_meta(run_at_text, overrides)) == 0 then
    return {-1, 0}
  end
  redis.call('HSET', K.bodies, id, body)
  if run_at <= now then
    place(K, {}, nil, {id})
  else
    place(K, {run_at_text, id}, run_at, {})
  end
  return {1, run_at}
end

-- Per topic group: its keys, and the writes gathered so far.
local G = {}
for g = 1, groups do
  G[g] = {K = topic_keys(2 + (g - 1) * KEY_GROUP_SIZE), ids = {}, bodies = {}, metas = {}, delayed = {}, ready = {}, seen = {}}
end

-- Each job's fields, from its line (job n is ARGV[first_job + n - 1]).
local J_group, J_at, J_overrides, J_id, J_body = {}, {}, {}, {}, {}
for n = 1, #ARGV - first_job + 1 do
  local group, at, overrides, id, body = string.match(ARGV[first_job + n - 1], LINE)
  group = tonumber(group)
  J_group[n], J_at[n], J_overrides[n], J_id[n], J_body[n] = group, at, overrides, id, body
  local ids = G[group].ids
  ids[#ids + 1] = id
end

-- Which ids already exist, per group, in one HMGET each.
local exists = {}
for g = 1, groups do
  exists[g] = {}
  local ids = G[g].ids
  if #ids > 0 then
    local metas = redis.call('HMGET', G[g].K.meta, unpack(ids))
    for n, id in ipairs(ids) do
      if metas[n] then
        exists[g][id] = metas[n]
      end
    end
  end
end

local function flush(g)
  local w = G[g]
  if #w.bodies > 0 then
    redis.call('HSET', w.K.bodies, unpack(w.bodies))
    w.bodies = {}
  end
  if #w.metas > 0 then
    redis.call('HSET', w.K.meta, unpack(w.metas))
    w.metas = {}
  end
  local first = math.huge
  for d = 1, #w.delayed, 2 do
    first = math.min(first, tonumber(w.delayed[d]))
  end
  place(w.K, w.delayed, first, w.ready)
  w.delayed, w.ready = {}, {}
end

local out = {}
for n = 1, #J_id do
  local gi = J_group[n]
  local w = G[gi]
  local id = J_id[n]
  local run_at, run_at_text = run_at_of(J_at[n])

  local code = 1
  local old = exists[gi][id] or w.seen[id]
  if old then
    if mode == 'c' then
      code = -1
    else
      flush(gi)
      local state = meta_decode(redis.call('HGET', w.K.meta, id)).state
      if state == 'l' then
        code = -3
      else
        code = 2
        if state == 'q' then
          unqueue(w.K, id)
        elseif state == 'd' then
          remove_receipt(w.K, id)
          code = 1
        else
          redis.call('ZREM', w.K.dead, id)
        end
        redis.call('HDEL', w.K.errors, id)
      end
    end
  end

  if code > 0 then
    w.metas[#w.metas + 1], w.metas[#w.metas + 2] = id, new_meta(run_at_text, J_overrides[n])
    w.bodies[#w.bodies + 1], w.bodies[#w.bodies + 2] = id, J_body[n]
    if run_at <= now then
      w.ready[#w.ready + 1] = id
    else
      local d = #w.delayed
      w.delayed[d + 1], w.delayed[d + 2] = run_at_text, id
    end
    w.seen[id] = true
  else
    run_at = 0
  end
  out[#out + 1] = code
  out[#out + 1] = run_at
end
for g = 1, groups do
  flush(g)
end
return out
