--[[
keys_walk: one step of a walk over a topic's jobs in this partition, counting each flow key's jobs by
state (bounded work per call); the callers walk until the cursor is '0'. With ARGV[3], only that
key's jobs count. Then, on the first step (cursor '0'), the keys with settings of their own and the
keys held.

The walk goes through the topic's own structures, where its queued and reserved jobs are, so that a
walk costs the topic's jobs, not the partition's (whatever hash keeps their metas), and reads the
metas of the ids it meets (jobs.lua), in this order:
  d  the delayed set, by rank: delayed, or ready once due (its run-at past, not yet moved)
  r  the ready list, by position (includes/queue.lua: a position never changes while its job stays
     in the list, whatever is taken meanwhile); its holes are skipped: ready
  f  the fair set (due jobs with a flow key waiting their turn), by rank: ready
  p  the parked (includes/flow.lua: 'key|run_at|id', jobs held back by their key's limits), after
     the last member read: ready
  l  the topic's leases (includes/leases.lua: its lex range of the partition's _leased_lex), after
     the last id read: reserved
A job counts only if its meta says it is in that state (queued, or leased): an id met whose job is
gone or has moved on is skipped. Jobs that move between the structures while a walk goes on (taken,
settled, falling due, put back) may be counted twice or not at all, as with a hash scan: the counts of
a busy topic are close, not exact.

KEYS        the topic's key group (keys.py Partition.key_group)
ARGV[1]     the cursor: '0' to start, else '<phase>:<where>' as a step returned it (opaque to callers)
ARGV[2]     ids read per call, about (holes and parked members included); 0: none (the first step's
            settings and holds alone)
ARGV[3]     a key, or '' for every key
Returns {next_cursor ('0': done), now_ms, then 4 values per key with jobs: key, delayed, ready,
         reserved, then (first step only) '', then 3 values per key with settings or a hold: key,
         settings (KeyLimits.encode, '' for none), held_until_ms ('' for none)}
]]
-- @include time
-- @include topic_keys
-- @include meta
-- @include leases
-- @include jobs

local CHUNK = 1000  -- ids per read at most (unpack has a limit)
local HOLE = ''  -- a hole of the ready list (queue.lua)

local K = topic_keys(1)
local now = now_ms()
local only = ARGV[3]
local budget = tonumber(ARGV[2])
local phase, at = 'd', ''
if ARGV[1] ~= '0' then
  phase, at = string.match(ARGV[1], '^([drfpl]):(.*)$')
  if not phase then
    return redis.error_reply('ERR keys_walk: bad cursor')
  end
end

local counts, order = {}, {}
local function count(key, slot)
  local c = counts[key]
  if not c then
    c = {0, 0, 0}
    counts[key] = c
    order[#order + 1] = key
  end
  c[slot] = c[slot] + 1
end

-- Counts the jobs `ids` in `state` by their metas, each in its slot (`due`: by id, the delayed set's
-- due jobs, which count as ready).
local function tally(ids, state, slot, due)
  if #ids == 0 then
    return
  end
  for i, raw in ipairs(metas_get(K, ids)) do
    if raw and string.sub(raw, 1, 1) == state then
      local key = meta_key(raw)
      if key ~= '' and (only == '' or key == only) then
        count(key, due and due[ids[i]] and 2 or slot)
      end
    end
  end
end

if budget <= 0 then
  phase = nil  -- no job read: the walk is over at once
end
while phase and budget > 0 do
  local want = math.min(budget, CHUNK)
  local read, ids = 0, {}
  if phase == 'd' then
    local rank = tonumber(at) or 0
    local got = redis.call('ZRANGE', K.delayed, rank, rank + want - 1, 'WITHSCORES')
    local due = {}
    for i = 1, #got, 2 do
      ids[#ids + 1] = got[i]
      if tonumber(got[i + 1]) <= now then
        due[got[i]] = true
      end
    end
    read = #ids
    tally(ids, QUEUED, 1, due)
    at = tostring(rank + read)
  elseif phase == 'r' then
    local length = redis.call('LLEN', K.ready)
    local head = (tonumber(redis.call('HGET', K.control, 'tail')) or 0) - length  -- the head's position
    local index = 0
    if at ~= '' then
      index = math.max(0, tonumber(at) - head)
    end
    local got = redis.call('LRANGE', K.ready, index, index + want - 1)
    for _, id in ipairs(got) do
      if id ~= HOLE then
        ids[#ids + 1] = id
      end
    end
    read = #got
    tally(ids, QUEUED, 2)
    at = tostring(head + index + read)
  elseif phase == 'f' then
    local rank = tonumber(at) or 0
    ids = redis.call('ZRANGE', K.fair, rank, rank + want - 1)
    read = #ids
    tally(ids, QUEUED, 2)
    at = tostring(rank + read)
  elseif phase == 'p' then
    local from = '-'
    if at ~= '' then
      from = '(' .. at
    end
    local members = redis.call('ZRANGE', K.parked, from, '+', 'BYLEX', 'LIMIT', 0, want)
    for _, member in ipairs(members) do
      local key, id = string.match(member, '^([^|]*)|%d+|(.*)$')
      if only == '' or key == only then
        ids[#ids + 1] = id
      end
    end
    read = #members
    tally(ids, QUEUED, 2)
    if read > 0 then
      at = members[read]
    end
  else  -- 'l'
    local from, to = leases_range(K)
    if at ~= '' then
      from = '(' .. lease_member(K, at)
    end
    local members = redis.call('ZRANGE', K.leases_lex, from, to, 'BYLEX', 'LIMIT', 0, want)
    for i, member in ipairs(members) do
      ids[i] = string.sub(member, #K.name + 2)
    end
    read = #ids
    tally(ids, RESERVED, 3)
    if read > 0 then
      at = ids[read]
    end
  end
  budget = budget - read
  if read < want then  -- this structure is walked: the next one, from its start
    phase, at = string.match('drfpl', phase .. '(.)'), ''
  end
end

local cursor = '0'
if phase then
  cursor = phase .. ':' .. at
end
local out = {cursor, now}
for _, key in ipairs(order) do
  local c = counts[key]
  out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = key, c[1], c[2], c[3]
end
if ARGV[1] == '0' then
  out[#out + 1] = ''
  local held = {}
  local with_held = redis.call('ZRANGEBYSCORE', K.held, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #with_held, 2 do
    held[with_held[i]] = with_held[i + 1]
  end
  local settings = {}
  if only ~= '' then
    settings[only] = redis.call('HGET', K.flows, only)
    held = {[only] = held[only]}
  else
    local all = redis.call('HGETALL', K.flows)
    for i = 1, #all, 2 do
      settings[all[i]] = all[i + 1]
    end
  end
  local named = {}
  for key in pairs(settings) do
    named[key] = true
  end
  for key in pairs(held) do
    named[key] = true
  end
  for key in pairs(named) do
    out[#out + 1], out[#out + 2], out[#out + 3] = key, settings[key] or '', held[key] or ''
  end
end
return out
