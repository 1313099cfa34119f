--[[
sweep: one pass over some topics of a partition, under the partition's lock. Moves due jobs from
the delayed set to the ready list, and takes back expired leases as failed attempts (retried after
their backoff, or dead). Then reads the partition's topic index (topic_index.lua) for what the next
call should sweep: the topics with a job due for at least `lag` ms (consumers take due jobs
themselves; the sweep moves only what none took), a lease expired or a receipt to forget
(forget.lua, sent with the sweep), and when the next of those
falls due. A call with no topics only renews the lock and reads the index: what an idle tick costs,
however many topics the partition has.

The lock is a fence: unless it holds this sweeper's token, nothing is done. A sweeper that was
paused past its lock's TTL learns here that it lost the lock, before it touches anything.

KEYS[1]      the partition's _lock
KEYS[2]      the partition's _delayed index
KEYS[3]      the partition's _receipts index
KEYS[4]      the partition's _indexed mark: set once the index covers every topic of _topics
KEYS[5..6]   the partition's outbox (keys.py Partition.outbox_keys: its _seq counter, its _outbox)
KEYS[7]      the partition's _leased set (leases.lua)
KEYS[8]      the partition's _leases index, as a version before _leased kept it: the topics whose
             leases move_leases.lua has still to move
KEYS[9 ...]  a key group per topic to sweep (keys.py Partition.key_group); the sweep sets each
             topic's index entries from its keys
ARGV[1]      lock token
ARGV[2]      lock TTL in ms, renewed by this call
ARGV[3]      limit: at most this many jobs moved plus leases taken back in this call
ARGV[4]      lag in ms: a delayed job is the sweep's once due this long
ARGV[5]      at most this many topics named in the reply
ARGV[6]      '1': the topics given end a walk of all of _topics, set the _indexed mark
then 3 values per topic group: the topic's retries, its backoff (comma-separated ms), its on_dead
            ('' none): a job whose expired lease was its last attempt leaves a record in the outbox
            for that topic (includes/callbacks.lua)
Returns {code, next_in_ms, indexed, outbox, now_ms, due, old, then `due` topic names, then `old` topic
         names, then 3 values per topic group: moved, retried, dead, then the ids of the dead, group
         after group}
  code        3 ok; -5 the lock does not hold this token, nothing was done
  next_in_ms  ms until the index next has work for the sweep, -1 if none
  indexed     1 if the _indexed mark is set: else the caller walks _topics once (an index left
              by an older version, or a new namespace), ending with ARGV[6]
  outbox      records in the outbox: callback jobs for the sweeper to make (next_in_ms is at most 0
              while there are)
  now_ms      Redis' time (0 with code -5)
  due         topics with work for the sweep now, at most ARGV[5]: the next call's
  old         topics of KEYS[8], at most ARGV[5]: for move_leases.lua
  moved       jobs moved to the ready list; retried, dead: expired leases taken back as such
]]
-- @include time
-- @include topic_keys
-- @include queue
-- @include leases
-- @include failed_attempt
-- @include callbacks
-- @include jobs

local LEASE_EXPIRED = 'lease expired: no answer from the consumer within the timeout'
local FIRST_GROUP = 9
local LEASES, OLD_LEASES = KEYS[7], KEYS[8]

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-5, -1, 0, 0, 0, 0, 0}
end
local O = outbox_of(KEYS[5], KEYS[6])
redis.call('PEXPIRE', KEYS[1], ARGV[2])

local now = now_ms()
local budget = tonumber(ARGV[3])
local lag = tonumber(ARGV[4])
local wanted = tonumber(ARGV[5])
local groups = {}  -- per topic group: its keys, its rules' first ARGV, what was done
local by_name = {}
for g = 1, (#KEYS - FIRST_GROUP + 1) / KEY_GROUP_SIZE do
  local K = topic_keys(FIRST_GROUP + (g - 1) * KEY_GROUP_SIZE)
  groups[g] = {K = K, a = 4 + 3 * g, moved = 0, retried = 0, dead = 0}
  by_name[K.name] = groups[g]
end
local dead_ids = {}

lease_batch()  -- the leases taken back: a command per lease set for all of them (leases.lua)
for _, group in ipairs(groups) do
  group.moved = promote(group.K, now, budget)
  budget = budget - group.moved
end
-- The expired leases of the topics given, soonest first, in one read of the partition's (those of
-- other topics are named in the reply, for the next call).
if budget > 0 and #groups > 0 then
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, budget)) do
    local topic, id = string.match(member, '^([^/]*)/(.*)$')
    local group = by_name[topic]
    if group then
      local K = group.K
      local retries, backoff, on_dead = tonumber(ARGV[group.a]), ARGV[group.a + 1], ARGV[group.a + 2]
      local raw = meta_get(K, id)
      local m = raw and meta_decode(raw)
      if not m or m.state ~= RESERVED then
        lease_remove(K, {id})  -- gone, or settled by a version before the lease sets (move_leases.lua)
      elseif failed_attempt(K, id, m, now, LEASE_EXPIRED, retries, backoff, false, 0, '', 'lease_expired') == 'dead' then
        group.dead = group.dead + 1
        dead_ids[#dead_ids + 1] = id
        if on_dead ~= '' then
          local body = body_get(K, id)
          callback_add(O, on_dead, K, id, m.key, m.attempts, 'dead', '', now, body, LEASE_EXPIRED)
        end
      else
        group.retried = group.retried + 1
      end
    end
  end
end
leases_flush()
for _, group in ipairs(groups) do
  if not index_delayed_exact(group.K) then
    forget_topic_if_empty(group.K)  -- a topic the index named that holds nothing more leaves it
  end
end
if ARGV[6] == '1' then
  redis.call('SET', KEYS[4], '1')
end

-- What the next call sweeps: topics due for the sweep now, delayed ones first, then those with an
-- expired lease, then receipts (a topic due in several is named once), and when the index next has
-- work for it.
local due, named = {}, {}
local function name(topic)
  if not named[topic] and #due < wanted then
    named[topic] = true
    due[#due + 1] = topic
  end
end
for _, topic in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - lag, 'LIMIT', 0, wanted)) do
  name(topic)
end
-- The soonest leases, in one read: the expired name their topics, the first says when the next expires.
local soonest = redis.call('ZRANGE', LEASES, 0, math.max(wanted - #due, 1) - 1, 'WITHSCORES')
for i = 1, #soonest, 2 do
  if tonumber(soonest[i + 1]) <= now then
    name(string.match(soonest[i], '^[^/]*'))
  end
end
if #due < wanted then
  for _, topic in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, wanted - #due)) do
    name(topic)
  end
end
local old = redis.call('ZRANGE', OLD_LEASES, 0, wanted - 1)
local next_at = tonumber(soonest[2])
for _, pick in ipairs({{KEYS[2], lag}, {KEYS[3], 0}}) do
  local at = first_score(pick[1])
  if at and at ~= math.huge and (next_at == nil or at + pick[2] < next_at) then
    next_at = at + pick[2]
  end
end
local next_in = -1
if next_at then
  next_in = math.max(0, next_at - now)
end
outbox_flush(O)
local outbox = redis.call('LLEN', O.list)
if outbox > 0 then
  next_in = 0
end
local indexed = 0
if redis.call('GET', KEYS[4]) then
  indexed = 1
end
local out = {3, next_in, indexed, outbox, now, #due, #old}
for _, topic in ipairs(due) do
  out[#out + 1] = topic
end
for _, topic in ipairs(old) do
  out[#out + 1] = topic
end
for _, group in ipairs(groups) do
  out[#out + 1], out[#out + 2], out[#out + 3] = group.moved, group.retried, group.dead
end
for _, id in ipairs(dead_ids) do
  out[#out + 1] = id
end
return out
