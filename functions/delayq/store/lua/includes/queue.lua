-- Where a queued job waits: the delayed set until its run-at, the ready list once due (a job with a
-- flow key: the fair set, below).
--
-- A ready job keeps its place: its position, tail - LLEN + its index (control 'tail' counts the ids
-- ever pushed at the tail), never changes while it stays in the list. Pushes at the tail count
-- themselves (push_ready); pushes at the head (LPUSH) and takes from the head change LLEN and the
-- index alike; a job removed from anywhere else leaves a hole (remove_ready) instead of shifting the
-- jobs behind it, and the take drops holes as it reaches them (take_ready). A listing's cursor is a
-- position (jobs_ready.lua): every job that stays ready is listed once, whatever moves meanwhile.
-- control 'holes' counts the holes in the list, so that LLEN - holes is how many jobs are ready.

-- A due job with a flow key waits in the topic's fair set instead, scored by its turn: a key's next job
-- takes the turn after the later of its key's last ready job (`turns`: key -> that turn, while the
-- key has ready jobs) and the topic's turn (control 'turn': that of the last job taken). Taking the
-- lowest turns first serves the keys in rotation, each in the order its jobs fell due (start-time
-- fair queuing): a key's backlog delays another key's jobs by one turn, not by its length. The
-- keyless ready list takes part as one key more (take_fair). A topic that never had a job with a key
-- has no fair set; control 'keyed' marks one that did, and control 'fair' one whose fair set holds jobs.

-- A key held to its limits (flow.lua) has its jobs that cannot start yet parked aside: they are
-- ready still (counted, listed, cancelled as such) and keep the topic in the ready index.

-- @include time
-- @include meta
-- @include topic_index
-- @include flow
-- @include jobs

local HOLE = ''  -- no job id is empty

-- The flow key of each of `ids` ('' for none), from their metas.
local function meta_keys(K, ids)
  local keys = {}
  for i, raw in ipairs(metas_get(K, ids)) do
    keys[i] = raw and meta_key(raw) or ''
  end
  return keys
end

-- meta_keys, or nil when the topic never had a job with a key (none of them has one).
local function keys_of(K, ids)
  if not redis.call('HGET', K.control, 'keyed') then
    return nil
  end
  return meta_keys(K, ids)
end

-- Adds `ids` with their `keys` to the fair set, each the next turn of its key; at the head (`head`:
-- jobs put back, whose turn came already) at the topic's turn, before every other.
local function push_fair(K, ids, keys, head)
  local turn = tonumber(redis.call('HGET', K.control, 'turn')) or 0
  local distinct, seen = {}, {}
  for _, key in ipairs(keys) do
    if not seen[key] then
      seen[key] = true
      distinct[#distinct + 1] = key
    end
  end
  local last = {}
  for i, at in ipairs(redis.call('HMGET', K.turns, unpack(distinct))) do
    last[distinct[i]] = math.max(tonumber(at) or turn, turn)
  end
  local adds = {}
  for i, id in ipairs(ids) do
    local at = turn
    if not head then
      at = last[keys[i]] + 1
      last[keys[i]] = at
    end
    adds[#adds + 1], adds[#adds + 2] = at, id
  end
  redis.call('ZADD', K.fair, unpack(adds))
  redis.call('HSET', K.control, 'fair', 1)
  local sets = {}
  for _, key in ipairs(distinct) do
    sets[#sets + 1], sets[#sets + 2] = key, last[key]
  end
  redis.call('HSET', K.turns, unpack(sets))
end

-- Of `ids`, those with a flow key go to the fair set (at its head with `head`); the keyless are
-- returned, in order. `keys`: each one's flow key, '' for none; false: none has one; nil: read from
-- their metas.
local function push_keyed(K, ids, keys, head)
  if keys == nil then
    keys = keys_of(K, ids)
  end
  if not keys then
    return ids
  end
  local plain, keyed, keyed_keys = {}, {}, {}
  for i, id in ipairs(ids) do
    if keys[i] == '' then
      plain[#plain + 1] = id
    else
      keyed[#keyed + 1], keyed_keys[#keyed_keys + 1] = id, keys[i]
    end
  end
  if #keyed > 0 then
    push_fair(K, keyed, keyed_keys, head)
  end
  return plain
end

-- Pushes `ids` at the tail of the ready list, in order (`now`: Redis' time in ms, read if not given);
-- those with a flow key into the fair set (`keys` as push_keyed takes them). True if the topic was
-- not in the ready index.
local function push_ready(K, ids, now, keys)
  local plain = push_keyed(K, ids, keys, false)
  if #plain > 0 then
    redis.call('RPUSH', K.ready, unpack(plain))
    redis.call('HINCRBY', K.control, 'tail', #plain)
  end
  return index_ready(K, now or now_ms())
end

-- Puts `ids` back at the head of the ready list, the first of them first (those with a flow key at
-- the head of the fair set).
local function push_ready_head(K, ids, now, keys)
  local plain = push_keyed(K, ids, keys, true)
  for i = #plain, 1, -1 do
    redis.call('LPUSH', K.ready, plain[i])
  end
  index_ready(K, now)
end

-- How many jobs are ready: the list's (but its holes), the fair set's and the parked.
local function ready_count(K, holes)
  return redis.call('LLEN', K.ready) - (holes or tonumber(redis.call('HGET', K.control, 'holes')) or 0)
    + redis.call('ZCARD', K.fair) + redis.call('ZCARD', K.parked)
end

-- With the ready list and the fair set both empty, the topic's keys' turns (all past) go, and it
-- leaves the ready index unless jobs are parked.
local function unindex_if_none_ready(K)
  local listed = redis.call('LLEN', K.ready)
  if redis.call('ZCARD', K.fair) == 0 then
    redis.call('HDEL', K.control, 'fair')
    redis.call('DEL', K.turns)
    if listed == 0 and redis.call('ZCARD', K.parked) == 0 then
      redis.call('ZREM', K.ready_index, K.name)
    end
  end
end

-- Takes a job out of the ready list: popped when it is the head, else left as a hole; or out of the
-- fair set, or of the parked (`m`: its decoded meta, for its key and run-at).
local function remove_ready(K, id, m)
  if redis.call('ZREM', K.fair, id) == 1 then
    unindex_if_none_ready(K)
    return
  end
  if m and m.key ~= '' and redis.call('ZREM', K.parked, parked_member(m.key, m.run_at, id)) == 1 then
    unwake_if_none_parked(K, m.key)
    unindex_if_none_ready(K)
    return
  end
  local at = redis.call('LPOS', K.ready, id)
  if at == 0 then
    redis.call('LPOP', K.ready)
    unindex_if_none_ready(K)
  elseif at then
    redis.call('LSET', K.ready, at, HOLE)
    redis.call('HINCRBY', K.control, 'holes', 1)
  end
end

-- Up to `count` ids off the head of the ready list (LRANGE + LTRIM), in order, reading on past the
-- holes it drops. Each read asks for one id more than it takes, to learn whether the list is empty
-- after it: a take that empties the list takes the topic out of the ready index, unless `others`
-- (jobs ready in the fair set).
local function take_ready(K, count, others)
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
      if (#ids > 0 or holes > 0 or #got > 0) and not others then
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

-- Up to `count` ready jobs in fair order: the fair set's by turn, and the keyless ready list's as one
-- key more, whose jobs take the turns after the topic's. With the limits `L` (flow.lua), a keyed job
-- whose key has no room is parked instead, and the set is read on past it (at most FAIR_SCAN jobs
-- parked per take); an admitted one's start is in L.starts (by id). Returns their ids, keyless first, and the turn of each keyed one (by id): what
-- forget_turns needs.
local FAIR_SCAN = 1000
local function take_fair(K, count, L)
  local turn = tonumber(redis.call('HGET', K.control, 'turn')) or 0
  local listed = redis.call('LLEN', K.ready)  -- holes included: take_ready may find fewer
  local plain, keyed, turns, parked, gone = 0, {}, {}, {}, {}
  local next_plain, i, read, more = turn + 1, 1, 0, true
  local fair, metas = {}, nil
  while plain + #keyed < count do
    if 2 * i > #fair and more and #parked < FAIR_SCAN then  -- every job read is used: read on
      local want = count - plain - #keyed
      fair = redis.call('ZRANGE', K.fair, read, read + want - 1, 'WITHSCORES')
      read, i, more = read + #fair / 2, 1, #fair == 2 * want
      if L and #fair > 0 then
        local ids = {}
        for n = 1, #fair, 2 do
          ids[#ids + 1] = fair[n]
        end
        metas = metas_get(K, ids)
      end
    end
    local id, at = fair[2 * i - 1], fair[2 * i] and tonumber(fair[2 * i])
    if plain < listed and (not at or next_plain <= at) then
      plain, next_plain = plain + 1, next_plain + 1
    elseif at then
      gone[#gone + 1] = id
      local raw = metas and metas[i]
      local key = raw and meta_key(raw) or ''
      local admitted, when = true, nil  -- its start if admitted (now, or its key's slot), else its wake
      if L and key ~= '' then
        admitted, when = flow_admit(L, key)
      end
      if admitted then
        if when then
          L.starts[id] = when
        end
        keyed[#keyed + 1] = id
        turns[id] = at
        turn = math.max(turn, at)
      else
        parked[#parked + 1] = {id = id, key = key, run_at = string.match(raw, '^%a|%d+|(%d+)|'), wake = when}
      end
      i = i + 1
    else
      break
    end
  end
  if #gone > 0 then
    redis.call('ZREM', K.fair, unpack(gone))
  end
  if #parked > 0 then
    flow_park(L, parked)
  end
  local ids = take_ready(K, plain, true)  -- the index is unindex_if_none_ready's, below
  if plain > 0 then
    turn = math.max(turn, next_plain - 1)
  end
  redis.call('HSET', K.control, 'turn', turn)
  for _, id in ipairs(keyed) do
    ids[#ids + 1] = id
  end
  unindex_if_none_ready(K)
  return ids, turns
end

-- The jobs of `keys` taken at `turns` (by id, from take_fair): a key whose last ready job was one of
-- them has none left, and its turn goes (a key with no ready job costs nothing).
local function forget_turns(K, ids, keys, turns)
  local taken = {}
  for i, id in ipairs(ids) do
    local key = keys[i]
    if turns[id] and key and key ~= '' then
      taken[key] = math.max(taken[key] or 0, turns[id])
    end
  end
  local names = {}
  for key in pairs(taken) do
    names[#names + 1] = key
  end
  if #names == 0 then
    return
  end
  local gone = {}
  for i, at in ipairs(redis.call('HMGET', K.turns, unpack(names))) do
    if at and tonumber(at) <= taken[names[i]] then
      gone[#gone + 1] = names[i]
    end
  end
  if #gone > 0 then
    redis.call('HDEL', K.turns, unpack(gone))
  end
end

-- Adds a job to the delayed set (the index learns when it falls due).
local function delay(K, id, run_at)
  redis.call('ZADD', K.delayed, run_at, id)
  index_delayed(K, run_at)
end

local function place(K, id, run_at, now, key)
  if run_at <= now then
    push_ready(K, {id}, now, key and {key})
  else
    delay(K, id, run_at)
  end
end

-- Takes a queued job (`m`: its decoded meta) out of wherever it waits.
local function unqueue(K, id, m)
  if redis.call('ZREM', K.delayed, id) == 0 then
    remove_ready(K, id, m)
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

-- take_due for a take: up to `limit` jobs due by `at`, earliest first, read with the run-at of the
-- first job left after them (nil: none), so that the take sets the index's entry without another
-- look. Read by rank a few at a time (a steady stream has few due at each take; a burst doubles its
-- reads), each read one job longer than it takes.
local POP_FIRST_READ = 8
local function pop_due(K, at, limit)
  local ids, left, want = {}, nil, math.min(limit, POP_FIRST_READ)
  while true do
    local head = redis.call('ZRANGE', K.delayed, #ids, #ids + want, 'WITHSCORES')
    for i = 1, #head, 2 do
      local run_at = tonumber(head[i + 1])
      if #ids == limit or run_at > at then
        left = run_at
        break
      end
      ids[#ids + 1] = head[i]
    end
    if left or #head < 2 * (want + 1) then
      break
    end
    want = math.min(limit - #ids, 2 * want)
  end
  if #ids > 0 then
    redis.call('ZREMRANGEBYRANK', K.delayed, 0, #ids - 1)
  end
  return ids, left
end

-- Takes out of the delayed set up to `limit` jobs falling due by `horizon` (not yet due) whose turn
-- would be the next: those of keys with no job waiting its turn (the keyless, while none is in the
-- ready list). Earliest first; the index's entry is then early, as after take_due. For a topic with
-- keys (take.lua knows it has some).
local function take_soon(K, now, horizon, limit)
  local soon = redis.call('ZRANGEBYSCORE', K.delayed, '(' .. now, horizon, 'LIMIT', 0, limit)
  if #soon == 0 then
    return soon
  end
  local keys, distinct, seen = meta_keys(K, soon), {}, {}
  local waiting = {}
  for _, key in ipairs(keys) do
    if key == '' then
      if waiting[''] == nil then
        waiting[''] = redis.call('LLEN', K.ready) > 0
      end
    elseif not seen[key] then
      seen[key] = true
      distinct[#distinct + 1] = key
    end
  end
  if #distinct > 0 then
    for i, at in ipairs(redis.call('HMGET', K.turns, unpack(distinct))) do
      waiting[distinct[i]] = at ~= false
    end
  end
  local ids = {}
  for i, id in ipairs(soon) do
    if not waiting[keys[i]] then
      ids[#ids + 1] = id
    end
  end
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
