--[[
enqueue: create or replace jobs of one partition, all in one atomic step (a single create, the
common call, is enqueue_one.lua's).

KEYS            a key group per topic of the jobs (keys.py Partition.key_group: its keys, and the
                partition's topic index, which learns when each topic next has work)
ARGV[1]         mode: 'c' create, refusing an existing job; 'r' create or replace
ARGV[2 ...]     one line per job, 'group|at|overrides|key|id|body':
  group         1-based index of the job's key group
  at            'd<ms>': a delay in ms from now; 'a<ms>': epoch ms (the past means now)
  overrides     'retries|timeout_ms|backoff_csv', the per-job overrides as the meta stores them,
                each '' for the topic's ('||' for none)
  key           its flow key, '' for none (the meta ends with '|key' when there is one)
  id            (no '|' in an id)
  body          JSON, the rest of the line
Returns a flat array, two values per job: code, run_at_ms
  code   1 created (a replace of a done job's receipt creates it anew), 2 replaced, -1 exists (create
         of an existing job, or of one whose receipt is kept: a dedupe window), -3 reserved (replace
         of a leased job); run_at_ms is 0 when the job was refused

Creates are gathered and written with one command per key (HSET, ZADD, RPUSH of many): the per-call
cost, not the per-job one, dominates a batch. A replace (PUT: one job per call) first writes what is
gathered, then reads the job's current state.
]]
-- @include time
-- @include topic_keys
-- @include meta
-- @include queue
-- @include receipts
-- @include create
-- @include jobs

local now = now_ms()
local now_text = tostring(now)
local groups = #KEYS / KEY_GROUP_SIZE
local mode = ARGV[1]
local first_job = 2
local LINE = '^(%d+)|([^|]*)|([^|]*|[^|]*|[^|]*)|([^|]*)|([^|]*)|(.*)$'

-- Per topic group: its keys, and the writes gathered so far.
local G = {}
for g = 1, groups do
  G[g] = {
    K = topic_keys(1 + (g - 1) * KEY_GROUP_SIZE), ids = {}, bodies = {}, metas = {}, delayed = {}, ready = {},
    ready_keys = {}, seen = {},
  }
end

-- Each job's fields, from its line (job n is ARGV[first_job + n - 1]).
local J_group, J_at, J_overrides, J_id, J_body, J_key = {}, {}, {}, {}, {}, {}
for n = 1, #ARGV - first_job + 1 do
  local group, at, overrides, key, id, body = string.match(ARGV[first_job + n - 1], LINE)
  group = tonumber(group)
  if key ~= '' then
    overrides = overrides .. '|' .. key
  end
  J_group[n], J_at[n], J_overrides[n], J_id[n], J_body[n], J_key[n] = group, at, overrides, id, body, key
  if key ~= '' then
    G[group].keyed = true
  end
  local ids = G[group].ids
  ids[#ids + 1] = id
end

-- Which ids already exist, per group, in one HMGET each.
local exists = {}
for g = 1, groups do
  exists[g] = {}
  local ids = G[g].ids
  if #ids > 0 then
    local metas = metas_get(G[g].K, ids)
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
    bodies_set(w.K, w.bodies)
    w.bodies = {}
  end
  if #w.metas > 0 then
    metas_set(w.K, w.metas)
    w.metas = {}
  end
  local first = math.huge
  for d = 1, #w.delayed, 2 do
    first = math.min(first, tonumber(w.delayed[d]))
  end
  place(w.K, w.delayed, first, w.ready, now, w.keyed and w.ready_keys, w.keyed)
  w.delayed, w.ready, w.ready_keys = {}, {}, {}
end

local out = {}
for n = 1, #J_id do
  local gi = J_group[n]
  local w = G[gi]
  local id = J_id[n]
  local run_at, run_at_text = run_at_of(J_at[n], now, now_text)

  local code = 1
  local old = exists[gi][id] or w.seen[id]
  if old then
    if mode == 'c' then
      code = -1
    else
      flush(gi)
      local m = meta_decode(meta_get(w.K, id))
      local state = m.state
      if state == RESERVED then
        code = -3
      else
        code = 2
        if state == QUEUED then
          unqueue(w.K, id, m)
        elseif state == DONE then
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
    w.metas[#w.metas + 1], w.metas[#w.metas + 2] = id, new_meta(run_at_text, now_text, J_overrides[n])
    w.bodies[#w.bodies + 1], w.bodies[#w.bodies + 2] = id, J_body[n]
    if run_at <= now then
      w.ready[#w.ready + 1] = id
      w.ready_keys[#w.ready_keys + 1] = J_key[n]
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
