-- Where a queued job waits: the delayed set until its run-at, the ready list once due.
--
-- A ready job keeps its place: its position, tail - LLEN + its index (control 'tail' counts the ids
-- ever pushed at the tail), never changes while it stays in the list. Pushes at the tail count
-- themselves (push_ready); pushes at the head (LPUSH) and takes from the head change LLEN and the
-- index alike; a job removed from anywhere else leaves a hole (remove_ready) instead of shifting the
-- jobs behind it, and the take drops holes as it reaches them (take_ready). A listing's cursor is a
-- position (jobs_ready.lua): every job that stays ready is listed once, whatever moves meanwhile.
-- control 'holes' counts the holes in the list, so that LLEN - holes is how many jobs are ready.

-- @include time
-- @include topic_index

local HOLE = ''  -- no job id is empty

-- Pushes `ids` at the tail of the ready list, in order (`now`: Redis' time in ms, read if not given).
-- True if the topic was not in the ready index.
local function push_ready(K, ids, now)
  redis.call('RPUSH', K.ready, unpack(ids))
  redis.call('HINCRBY', K.control, 'tail', #ids)
  return index_ready(K, now or now_ms())
end

-- Puts `ids` back at the head of the ready list, the first of them first.
local function push_ready_head(K, ids, now)
  for i = #ids, 1, -1 do
    redis.call('LPUSH', K.ready, ids[i])
  end
  index_ready(K, now)
end

-- Takes a job out of the ready list: popped when it is the head, else left as a hole.
local function remove_ready(K, id)
  local at = redis.call('LPOS', K.ready, id)
  if at == 0 then
    redis.call('LPOP', K.ready)
    if redis.call('LLEN', K.ready) == 0 then
      redis.call('ZREM', K.ready_index, K.name)
    end
  elseif at then
    redis.call('LSET', K.ready, at, HOLE)
    redis.call('HINCRBY', K.control, 'holes', 1)
  end
end

-- Up to `count` ids off the head of the ready list (LRANGE + LTRIM), in order, reading on past the
-- holes it drops. Each read asks for one id more than it takes, to learn whether the list is empty
-- after it: a take that empties the list takes the topic out of the ready index.
local function take_ready(K, count)
  local ids, holes = {}, 0
  while #ids < count do
    local want = count - #ids
    local got = redis.call('LRANGE', K.ready, 0, want)
    local n = math.min(#got, want)
    if n > 0 then
      redis.call('LTRIM', K.ready, n, -1)
    end
    for i = 1, n do
      if got[i] == HOLE then
        holes = holes + 1
      else
        ids[#ids + 1] = got[i]
      end
    end
    if #got <= want then
      if #ids > 0 or holes > 0 or #got > 0 then
        redis.call('ZREM', K.ready_index, K.name)
      end
      break
    end
  end
  if holes > 0 then
    redis.call('HINCRBY', K.control, 'holes', -holes)
  end
  return ids
end

-- Adds a job to the delayed set (the index learns when it falls due).
local function delay(K, id, run_at)
  redis.call('ZADD', K.delayed, run_at, id)
  index_delayed(K, run_at)
end

local function place(K, id, run_at, now)
  if run_at <= now then
    push_ready(K, {id}, now)
  else
    delay(K, id, run_at)
  end
end

local function unqueue(K, id)
  if redis.call('ZREM', K.delayed, id) == 0 then
    remove_ready(K, id)
  else
    index_delayed_exact(K)
  end
end

-- Takes up to `limit` due jobs out of the delayed set and returns their ids, earliest first. The
-- index's entry is then early: the caller sets it (index_delayed_exact) once done with the topic.
local function take_due(K, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', K.delayed, '-inf', now, 'LIMIT', 0, limit)
  if #ids > 0 then
    redis.call('ZREM', K.delayed, unpack(ids))
  end
  return ids
end

-- Moves up to `limit` due jobs from the delayed set to the tail of the ready list; returns how many.
local function promote(K, now, limit)
  if limit <= 0 then
    return 0
  end
  local ids = take_due(K, now, limit)
  if #ids > 0 then
    push_ready(K, ids, now)
  end
  return #ids
end
