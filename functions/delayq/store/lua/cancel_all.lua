--[[
cancel_all: cancel the jobs of one topic in one state in this partition, at most `limit` per call
(the caller calls again while jobs are left): each is gone, as cancel.lua leaves it.

delayed  the soonest first (ZRANGE 0 limit-1 of the delayed set)
ready    from the head of the ready list, as a take reads it (LRANGE + LTRIM): the jobs behind keep
         their positions (includes/queue.lua), and the holes met are dropped and uncounted. An id
         whose job is no longer queued is dropped too, as the take drops it; then the fair set's jobs
         (those with flow keys), in the order of their turns; then the parked (includes/flow.lua)
dead     the oldest deaths first

KEYS[1..22] the topic's key group (keys.py Partition.key_group): a topic left with no ready or
            delayed job leaves the partition's topic index
ARGV[1]     'delayed', 'ready' or 'dead'
ARGV[2]     limit: at most this many ids (ready: jobs and holes) read in this call
Returns {cancelled, left}: how many jobs this call cancelled, how many are left in that state here.
]]
-- @include meta
-- @include topic_keys
-- @include queue
-- @include jobs

local K = topic_keys(1)
local state = ARGV[1]
local limit = tonumber(ARGV[2])
local gone = {}

if state == 'ready' then
  local got = redis.call('LRANGE', K.ready, 0, limit - 1)
  if #got > 0 then
    redis.call('LTRIM', K.ready, #got, -1)
  end
  local holes = 0
  local ids = {}
  for _, id in ipairs(got) do
    if id == HOLE then
      holes = holes + 1
    else
      ids[#ids + 1] = id
    end
  end
  if holes > 0 then
    redis.call('HINCRBY', K.control, 'holes', -holes)
  end
  local room = limit - #got
  if room > 0 then  -- the list is done: the fair set's jobs (those with flow keys) next
    local fair = redis.call('ZRANGE', K.fair, 0, room - 1)
    if #fair > 0 then
      redis.call('ZREM', K.fair, unpack(fair))
    end
    for _, id in ipairs(fair) do
      ids[#ids + 1] = id
    end
    room = room - #fair
  end
  if room > 0 then  -- then the parked (flow.lua), key by key
    local parked = redis.call('ZRANGE', K.parked, 0, room - 1)
    if #parked > 0 then
      redis.call('ZREM', K.parked, unpack(parked))
    end
    local keys = {}
    for _, member in ipairs(parked) do
      local key, id = string.match(member, '^([^|]*)|%d+|(.*)$')
      ids[#ids + 1], keys[key] = id, true
    end
    for key in pairs(keys) do
      unwake_if_none_parked(K, key)
    end
  end
  if #ids > 0 then
    local metas = metas_get(K, ids)
    for i, id in ipairs(ids) do
      if metas[i] and string.sub(metas[i], 1, 2) == QUEUED .. '|' then
        gone[#gone + 1] = id
      end
    end
  end
else
  local set = K.delayed
  if state == 'dead' then
    set = K.dead
  end
  gone = redis.call('ZRANGE', set, 0, limit - 1)
  if #gone > 0 then
    redis.call('ZREM', set, unpack(gone))
  end
end

if #gone > 0 then
  jobs_delete(K, gone)
  redis.call('HDEL', K.errors, unpack(gone))
end

local left
if state == 'ready' then
  left = ready_count(K)
  unindex_if_none_ready(K)
elseif state == 'dead' then
  left = redis.call('ZCARD', K.dead)
else
  left = redis.call('ZCARD', K.delayed)
  index_delayed_exact(K)
end
return {#gone, left}
