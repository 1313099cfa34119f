-- Limits on a flow key's jobs (core/flows.py): how many may be reserved at once (concurrency), how
-- fast they may start (a GCRA bucket per key, as rate.lua's per topic), whether they may start at all
-- (paused; held by a receiver's Retry-After until a time). The topic's config gives every key's
-- defaults (the take's arguments); a key's own settings (`flows`: key -> core/flows.py
-- KeyLimits.encode) win field by field.
--
-- The take admits a keyed job when its key has room (flow_admit); a job whose key has none is parked
-- (`parked`: score 0, member 'key|run_at|id', so that one key's jobs are found by ZRANGE BYLEX in
-- run-at order) and its key gets a wake time (`wake`: key -> ms, '+inf' while only a settle or a
-- change of its settings can give it room). A take first moves the parked jobs of the keys whose wake
-- time has come back to the head of the fair set, as many as their keys have room for (flow_unpark).
-- A key at its limit is thus looked at once per wake, never once per parked job per take.
--
-- `busy` (key -> jobs reserved) is kept while some key may have a concurrency (control 'busy'): every
-- lease of a keyed job counts, every settle (ack, failed attempt, lease expiry, untake, cancel) takes
-- it back and wakes the key (flow_release). `pace` (key -> the bucket's theoretical arrival time, µs)
-- and `held` (key -> until, ms) keep only keys whose bucket is refilling or whose hold lasts: an idle key
-- with no settings is in none of these keys.

-- @include meta
-- @include leases
-- @include jobs

local FLOW_UNPARK_KEYS = 100  -- keys whose wake time has come, looked at per take at most
-- A key's start that its rate allows within this many µs is taken now and started then (its slot): a
-- consumer that comes a little late to each start does not lose that time from the key's rate.
local FLOW_PACE_AHEAD_US = 40000
local PARKED_RUN_AT = '%015d'

-- The member of the parked set of a job of `key` due at `run_at`.
local function parked_member(key, run_at, id)
  return key .. '|' .. string.format(PARKED_RUN_AT, tonumber(run_at)) .. '|' .. id
end

-- Counts every keyed job leased now into `busy`: the leases made before concurrency was counted.
local function count_busy(K)
  redis.call('DEL', K.busy)
  local leased = lease_ids(K)
  local counts = {}
  for first = 1, #leased, 1000 do
    local ids = {unpack(leased, first, math.min(first + 999, #leased))}
    for _, raw in ipairs(metas_get(K, ids)) do
      local key = raw and meta_key(raw)
      if key and key ~= '' then
        counts[key] = (counts[key] or 0) + 1
      end
    end
  end
  local sets = {}
  for key, n in pairs(counts) do
    sets[#sets + 1], sets[#sets + 2] = key, n
  end
  if #sets > 0 then
    redis.call('HSET', K.busy, unpack(sets))
  end
  redis.call('HSET', K.control, 'busy', 1)
end

-- The limits of a take of one topic, or nil when none can apply (no key limit in the topic's config,
-- no key with settings or a hold of its own, no job parked): the fair take then costs nothing more.
-- `control` holds the topic's control fields 'flows', 'held', 'busy', 'parked' as read; `defaults` the topic's shares:
-- {concurrency, interval, tolerance}, numbers or nil.
local function flow_open(K, control, defaults, now, now_us)
  local counting = defaults.concurrency or control.flows
  if not counting and control.busy then
    redis.call('DEL', K.busy)
    redis.call('HDEL', K.control, 'busy')
  end
  if not (counting or defaults.interval or control.held or control.parked) then
    return nil
  end
  if counting and not control.busy then
    count_busy(K)
  end
  local held = control.held
  if held then
    redis.call('ZREMRANGEBYSCORE', K.held, '-inf', now)
    if redis.call('ZCARD', K.held) == 0 then
      redis.call('HDEL', K.control, 'held')
      held = false
    end
  end
  if defaults.interval or control.flows then
    redis.call('ZREMRANGEBYSCORE', K.pace, '-inf', now_us)  -- a full bucket is no entry
  end
  return {
    K = K, now = now, now_us = now_us, defaults = defaults, own = control.flows, held = held, keys = {}, starts = {},
  }
end

-- What is in force for `key`, read once per take: its limits, jobs reserved, bucket and hold.
local function flow_key(L, key)
  local s = L.keys[key]
  if s then
    return s
  end
  local d = L.defaults
  s = {concurrency = d.concurrency, interval = d.interval, tolerance = d.tolerance, taken = 0}
  local raw = L.own and redis.call('HGET', L.K.flows, key)
  if raw then
    local concurrency, interval, tolerance
    s.paused, concurrency, interval, tolerance = string.match(raw, '^[^|]*|[^|]*|[^|]*|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    s.paused = s.paused == '1'
    s.concurrency = tonumber(concurrency) or s.concurrency
    if interval ~= '' then
      s.interval, s.tolerance = tonumber(interval), tonumber(tolerance)
    end
  end
  if s.concurrency then
    s.busy = tonumber(redis.call('HGET', L.K.busy, key)) or 0
  end
  if s.interval then
    s.tat = tonumber(redis.call('ZSCORE', L.K.pace, key)) or L.now_us
    s.tat0 = s.tat
  end
  if L.held then
    s.held = tonumber(redis.call('ZSCORE', L.K.held, key))
  end
  L.keys[key] = s
  return s
end

-- How many more jobs of `key` may start now; when none, also the ms at which to look at it again
-- ('+inf': when a settle or a change of its settings wakes it).
local function flow_room(L, key)
  local s = flow_key(L, key)
  if s.paused then
    return 0, '+inf'
  end
  if s.held and s.held > L.now then
    return 0, s.held
  end
  local room = math.huge
  if s.concurrency then
    room = s.concurrency - s.busy - s.taken
    if room <= 0 then
      return 0, '+inf'
    end
  end
  if s.interval then
    local at = math.max(s.tat, L.now_us)
    local starts = math.floor((L.now_us + FLOW_PACE_AHEAD_US + s.tolerance - at) / s.interval)
    if starts <= 0 then
      return 0, math.ceil((at + s.interval - s.tolerance - FLOW_PACE_AHEAD_US) / 1000)
    end
    room = math.min(room, starts)
  end
  return room
end

-- Whether a job of `key` may start (and if so it counts, and its start in ms: now, or its key's next
-- slot if the rate allows that one within FLOW_PACE_AHEAD_US), else when to look at the key again.
local function flow_admit(L, key)
  local room, wake = flow_room(L, key)
  if room <= 0 then
    return false, wake
  end
  local s = L.keys[key]
  s.taken = s.taken + 1
  local start = L.now
  if s.interval then
    local at = math.max(s.tat, L.now_us)
    local slot = at + s.interval - s.tolerance
    if slot > L.now_us then
      start = math.ceil(slot / 1000)
    end
    s.tat = at + s.interval
  end
  return true, start
end

-- Parks `jobs` ({id, key, run_at, wake} each) until their keys' wake times.
local function flow_park(L, jobs)
  local members, wakes = {}, {}
  for _, job in ipairs(jobs) do
    members[#members + 1], members[#members + 2] = 0, parked_member(job.key, job.run_at, job.id)
    wakes[job.key] = job.wake
  end
  redis.call('ZADD', L.K.parked, unpack(members))
  local sets = {}
  for key, at in pairs(wakes) do
    sets[#sets + 1], sets[#sets + 2] = at, key
  end
  redis.call('ZADD', L.K.wake, unpack(sets))
  redis.call('HSET', L.K.control, 'parked', 1)
end

-- The parked ids of `key`, at most `limit`, in run-at order, and their members.
local function parked_of(K, key, limit)
  local members = redis.call('ZRANGE', K.parked, '[' .. key .. '|', '(' .. key .. '}', 'BYLEX', 'LIMIT', 0, limit)
  local ids = {}
  for i, member in ipairs(members) do
    ids[i] = string.sub(member, #key + 2 + #string.format(PARKED_RUN_AT, 0) + 1)
  end
  return ids, members
end

-- Forgets `key`'s wake time once it has no parked job (and control 'parked' with the last); true if so.
local function unwake_if_none_parked(K, key)
  if #parked_of(K, key, 1) > 0 then
    return false
  end
  redis.call('ZREM', K.wake, key)
  if redis.call('ZCARD', K.wake) == 0 then
    redis.call('HDEL', K.control, 'parked')
  end
  return true
end

-- The parked jobs of the keys whose wake time has come, as many as each key has room for and at most
-- `room` in all: back to the head of the fair set (their turn came already). A key left with parked
-- jobs is looked at again by the next take once some moved (the room they take is counted when they
-- are taken), else at its wake time.
local function flow_unpark(L, room, push_head)
  local K = L.K
  local ids, keys = {}, {}
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', K.wake, '-inf', L.now, 'LIMIT', 0, FLOW_UNPARK_KEYS)) do
    if #ids >= room then
      break  -- the others keep their wake time: the next take looks at them
    end
    local n, wake = flow_room(L, key)
    n = math.min(n, room - #ids)
    if n > 0 then
      local moved, members = parked_of(K, key, n)
      if #members > 0 then
        redis.call('ZREM', K.parked, unpack(members))
        for _, id in ipairs(moved) do
          ids[#ids + 1], keys[#keys + 1] = id, key
        end
      end
    end
    if not unwake_if_none_parked(K, key) and n <= 0 then
      redis.call('ZADD', K.wake, wake, key)  -- no room: when it may have some
    end
  end
  if #ids > 0 then
    push_head(K, ids, keys)
  end
end

-- `zset` (of times, `per_ms` of them a ms) goes as a whole once its last time is past: a key whose
-- bucket is full again, or whose hold ended, costs nothing even if no take of its topic comes.
local function expire_at_last(zset, per_ms)
  local last = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', zset, math.ceil(tonumber(last) / per_ms) + 1)
end

-- The leases this take made of keyed jobs (`leased`: key -> how many): counted against their keys'
-- concurrency, spent from their buckets.
local function flow_commit(L, leased)
  local paced = false
  for key, n in pairs(leased) do
    local s = L.keys[key] or flow_key(L, key)
    if s.concurrency then
      redis.call('HINCRBY', L.K.busy, key, n)
    end
    if s.interval then
      redis.call('ZADD', L.K.pace, string.format('%d', math.max(s.tat0, L.now_us) + n * s.interval), key)
      paced = true
    end
  end
  if paced then
    expire_at_last(L.K.pace, 1000)
  end
end

-- Leases of `keys` (a list, '' for none) ended (acknowledged, failed, expired, taken back, cancelled):
-- they no longer count against their keys, and a key with parked jobs is looked at by the next take.
local function flow_release(K, keys)
  local counted = nil
  for _, key in ipairs(keys) do
    if key ~= '' then
      if counted == nil then
        counted = redis.call('HGET', K.control, 'busy') ~= false
      end
      if counted then
        if redis.call('HINCRBY', K.busy, key, -1) <= 0 then
          redis.call('HDEL', K.busy, key)
        end
        redis.call('ZADD', K.wake, 'XX', 'LT', 0, key)
      end
    end
  end
end

-- A receiver asked, by a Retry-After, that `key` wait until `until_ms`: its jobs stay ready until then.
local function flow_hold(K, key, until_ms)
  redis.call('ZADD', K.held, 'GT', until_ms, key)
  redis.call('HSET', K.control, 'held', 1)
  expire_at_last(K.held, 1)
  redis.call('ZADD', K.wake, 'XX', 'GT', until_ms, key)
end
