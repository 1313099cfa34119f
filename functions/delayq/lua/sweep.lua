--[[
sweep: one pass over some topics of a partition, under the partition's lock. Moves due jobs from
the delayed set to the ready list, and takes back expired leases as failed attempts (retried after
their backoff, or dead).

The lock is a fence: unless it holds this sweeper's token, nothing is done. A sweeper that was
paused past its lock's TTL learns here that it lost the lock, before it touches anything.

KEYS[1]      the partition's _lock
KEYS[2]      the partition's _topics set
KEYS[3 ...]  a key group per topic (keys.py Partition.key_group); the sweep sets the partition's
             topic index of each from its keys (topic_index.lua)
ARGV[1]      lock token
ARGV[2]      lock TTL in ms, renewed by this call
ARGV[3]      limit: at most this many jobs moved plus leases taken back in this call
then 2 values per topic group: the topic's retries, its backoff (comma-separated ms)
Returns {code, next_in_ms, more, topics, then 3 values per topic group: moved, retried, dead}
  code        3 ok; -5 the lock does not hold this token, nothing was done
  next_in_ms  ms until the next job falls due or lease expires in these topics, -1 if none
  more        1 if the limit was reached: call again at once
  topics      how many topics the partition has: more than the caller knows means new ones
  moved       jobs moved to the ready list; retried, dead: expired leases taken back as such
]]
-- @include time
-- @include topic_keys
-- @include queue
-- @include failed_attempt

local LEASE_EXPIRED = 'lease expired: no answer from the consumer within the timeout'

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-5, -1, 0, 0}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])

local now = now_ms()
local budget = tonumber(ARGV[3])
local groups = (#KEYS - 2) / KEY_GROUP_SIZE
local counts = {}

for g = 1, groups do
  local K = topic_keys(3 + (g - 1) * KEY_GROUP_SIZE)
  local moved, retried, dead = promote(K, now, budget), 0, 0
  budget = budget - moved
  if budget > 0 then
    local expired = redis.call('ZRANGEBYSCORE', K.leased, '-inf', now, 'LIMIT', 0, budget)
    local retries, backoff = tonumber(ARGV[2 + 2 * g]), ARGV[3 + 2 * g]
    for _, id in ipairs(expired) do
      local raw = redis.call('HGET', K.meta, id)
      if not raw then
        redis.call('ZREM', K.leased, id)
      elseif failed_attempt(K, id, meta_decode(raw), now, LEASE_EXPIRED, retries, backoff, false) == 'dead' then
        dead = dead + 1
      else
        retried = retried + 1
      end
    end
    budget = budget - #expired
  end
  counts[#counts + 1], counts[#counts + 2], counts[#counts + 3] = moved, retried, dead
end

local next_at = nil
for g = 1, groups do
  local K = topic_keys(3 + (g - 1) * KEY_GROUP_SIZE)
  for _, at in ipairs({index_delayed_exact(K) or false, index_leased_exact(K) or false}) do
    if at and (next_at == nil or at < next_at) then
      next_at = at
    end
  end
end

local next_in = -1
if next_at then
  next_in = math.max(0, next_at - now)
end
local more = 0
if budget <= 0 then
  more = 1
end
local out = {3, next_in, more, redis.call('SCARD', KEYS[2])}
for i = 1, #counts do
  out[4 + i] = counts[i]
end
return out
