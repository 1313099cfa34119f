--[[
jobs_scored: a page of one topic's jobs kept in a sorted set (delayed by run-at, leased by lease
deadline, dead by time of death), after a cursor, soonest or newest first.

Members order by score, then by id byte by byte, as Redis orders them. The cursor is the (score, id)
of the last job listed, excluded: the page starts just past where that pair stands, or would stand if
its job has left the set or moved (its rank when it is still there with that score, else a binary
search among the members of that score). So a job that stays in the set keeps its place relative to
the cursor, and a walk of the pages lists it exactly once. O(log(n)^2 + page), never a scan (the
leased: O(the topic's leases)).

KEYS[1..22] the topic's key group (keys.py Partition.key_group): the leased are the partition's
            (leases.lua), a topic's read whole and paged here: as many as its consumers' workers
ARGV[1]     the set: 'delayed', 'leased' or 'dead'
ARGV[2]     'asc' (lowest score first) or 'desc' (highest first)
ARGV[3]     limit: at most this many jobs
ARGV[4]     the cursor's score (an integer), '' to start at the first job
ARGV[5]     the cursor's id
Returns 5 values per job, in page order: id, score, meta, body, last_error (nil where none)
]]
-- @include topic_keys
-- @include leases
-- @include jobs

local K = topic_keys(1)
local descending = ARGV[2] == 'desc'
local limit = tonumber(ARGV[3])
local score, cursor_id = ARGV[4], ARGV[5]

-- The set as three reads: how many members, the ids and scores of ranks first..last (from 0), and how
-- many members sort before (score, id) with whether that pair is itself a member.
local card, range, rank_of
if ARGV[1] == 'leased' then
  local leases = leases_of(K)
  card = function()
    return #leases
  end
  range = function(first, last)
    local ids, scores = {}, {}
    for i = first + 1, math.min(last + 1, #leases) do
      ids[#ids + 1], scores[#scores + 1] = leases[i].id, leases[i].deadline
    end
    return ids, scores
  end
  rank_of = function(id)
    local at, before = tonumber(score), 0
    for _, lease in ipairs(leases) do
      if lease.deadline == at and lease.id == id then
        return before, true
      end
      if lease.deadline < at or (lease.deadline == at and bytes_before(lease.id, id)) then
        before = before + 1
      end
    end
    return before, false
  end
else
  local key = K[ARGV[1]]
  card = function()
    return redis.call('ZCARD', key)
  end
  range = function(first, last)
    local found = redis.call('ZRANGE', key, first, last, 'WITHSCORES')
    local ids, scores = {}, {}
    for i = 1, #found, 2 do
      ids[#ids + 1], scores[#scores + 1] = found[i], found[i + 1]
    end
    return ids, scores
  end
  rank_of = function(id)
    local own = redis.call('ZSCORE', key, id)
    if own and tonumber(own) == tonumber(score) then
      return redis.call('ZRANK', key, id), true
    end
    local low = redis.call('ZCOUNT', key, '-inf', '(' .. score)
    local high = redis.call('ZCOUNT', key, '-inf', score)
    while low < high do
      local mid = math.floor((low + high) / 2)
      if bytes_before(redis.call('ZRANGE', key, mid, mid)[1], id) then
        low = mid + 1
      else
        high = mid
      end
    end
    return low, false
  end
end

local first, last
if descending then
  if score == '' then
    last = card() - 1
  else
    last = rank_of(cursor_id) - 1
  end
  first = math.max(0, last - limit + 1)
else
  first = 0
  if score ~= '' then
    local rank, present = rank_of(cursor_id)
    first = present and rank + 1 or rank
  end
  last = first + limit - 1
end
if limit < 1 or last < first then
  return {}
end

local ids, scores = range(first, last)
if #ids == 0 then
  return {}
end
local metas = metas_get(K, ids)
local bodies = bodies_get(K, ids)
local errors = redis.call('HMGET', K.errors, unpack(ids))
local out = {}
local from, to, step = 1, #ids, 1
if descending then
  from, to, step = #ids, 1, -1
end
for i = from, to, step do
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = ids[i], scores[i], metas[i], bodies[i], errors[i]
end
return out
