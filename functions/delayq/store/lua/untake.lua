--[[
untake: undo takes of one topic whose reply their consumer never got, so that the jobs they leased
to nobody are not held until their leases expire and counted as failed attempts.

A take whose reply is lost (Redis hung past the consumer's socket timeout, a connection cut after the
call was sent) may have run, or may still run later, when Redis reads it. For each take id: the jobs
still leased under it (their lease token is the take's id, take.lua) go back to the head of the ready
list, queued, with the attempt the take counted taken back: no handler saw them. A job the take took
ahead of its run-at that is still not due goes back to the delayed set instead. A take id that
leased nothing yet is recorded in the partition's _untaken set, so that the take, if it reaches Redis
after all, leases nothing (take.lua); the topic's control 'untaken' says until when its takes must
look there. Records older than a day are dropped.

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
KEYS[23]    the partition's _untaken set: take id -> when it was undone (ms)
ARGV        take ids
Returns the number of jobs put back.
]]
-- @include time
-- @include topic_keys
-- @include meta
-- @include leases
-- @include topic_index
-- @include queue
-- @include jobs

local K = topic_keys(1)
local untaken = KEYS[KEY_GROUP_SIZE + 1]
local now = now_ms()
local KEEP_MS = 86400000
local CHUNK = 1000  -- ids per HMGET (unpack has a limit)

local stale = redis.call('ZRANGEBYSCORE', untaken, '-inf', now - KEEP_MS, 'LIMIT', 0, CHUNK)
if #stale > 0 then
  redis.call('ZREM', untaken, unpack(stale))
end

local wanted, found = {}, {}
for _, take_id in ipairs(ARGV) do
  wanted[take_id] = true
end

-- Every job leased in this topic and partition: as many as its consumers' workers, read in chunks.
local back = {}
local leased = lease_ids(K)
for first = 1, #leased, CHUNK do
  local ids = {unpack(leased, first, math.min(first + CHUNK - 1, #leased))}
  local metas = metas_get(K, ids)
  for i, id in ipairs(ids) do
    local take_id = metas[i] and meta_lease(metas[i])
    if take_id and wanted[take_id] then
      found[take_id] = true
      back[#back + 1] = {id = id, meta = metas[i]}
    end
  end
end

local readied, readied_keys, released = {}, {}, {}
for _, job in ipairs(back) do  -- at the head in the order of their deadlines (leases_of)
  local m = meta_decode(job.meta)
  released[#released + 1] = m.key
  m.state, m.attempts, m.lease = QUEUED, tonumber(m.attempts) - 1, ''
  metas_set(K, {job.id, meta_encode(m)})
  if tonumber(m.run_at) > now then  -- taken ahead, and still not due
    delay(K, job.id, tonumber(m.run_at))
  else
    readied[#readied + 1], readied_keys[#readied_keys + 1] = job.id, m.key
  end
end
if #readied > 0 then
  push_ready_head(K, readied, now, readied_keys)
end
if #back > 0 then
  local ids = {}
  for i, job in ipairs(back) do
    ids[i] = job.id
  end
  lease_remove(K, ids)
  flow_release(K, released)
end

local recorded = false
for _, take_id in ipairs(ARGV) do
  if not found[take_id] then
    found[take_id] = true
    redis.call('ZADD', untaken, now, take_id)
    recorded = true
  end
end
if recorded then
  redis.call('PEXPIRE', untaken, KEEP_MS)  -- the whole set goes a day after the last undo
  redis.call('HSET', K.control, 'untaken', now + KEEP_MS)  -- the topic's takes look in the set till then
end
return #back
