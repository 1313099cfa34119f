-- What every create writes, shared by enqueue.lua (batches and replaces) and enqueue_one.lua (the
-- single create).

-- @include meta
-- @include topic_index
-- @include queue

-- A job's run-at from 'd<ms>' (a delay from `now`) or 'a<ms>' (epoch ms; the past means now), as a
-- number and as text (`now_text` is `now`'s).
local function run_at_of(at, now, now_text)
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

-- The meta (meta.lua) of a job created at `now_text` with the per-job `overrides`
-- ('retries|timeout_ms|backoff_csv').
local function new_meta(run_at_text, now_text, overrides)
  return QUEUED .. '|0|' .. run_at_text .. '|' .. now_text .. '||' .. overrides
end

-- Queues a topic's new jobs: `delayed` (run-at, id pairs; `first` the earliest run-at) and `ready`
-- (ids due `now`, with their flow keys `ready_keys`, or false if none has one). The topic joins the
-- partition's _topics when this makes it known to the topic index (a topic in the index is in
-- _topics: forget_topic_if_empty takes it out of both). `keyed`: some of the jobs have a flow key.
local function place(K, delayed, first, ready, now, ready_keys, keyed)
  if keyed then
    redis.call('HSET', K.control, 'keyed', 1)
  end
  local new_in_index = false
  if #delayed > 0 then
    redis.call('ZADD', K.delayed, unpack(delayed))
    new_in_index = index_delayed(K, first)
  end
  if #ready > 0 and push_ready(K, ready, now, ready_keys) then
    -- New to the ready index: known to the delayed index too, so that its next delayed job finds it
    new_in_index = index_known(K) or new_in_index
  end
  if new_in_index then
    redis.call('SADD', K.topics, K.name)
  end
end
