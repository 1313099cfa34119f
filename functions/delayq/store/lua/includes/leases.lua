-- Every lease of a partition is a member `topic/id` (no topic name has a '/') of two sorted sets of
-- the partition (keys.py TOPIC_INDEX_KEYS), whatever its topic:
--   _leased      scored by the lease's deadline (ms): the sweeper takes back the expired from there
--   _leased_lex  scored 0: one topic's leases are the lex range [topic/, (topic0 ('0' follows '/')
-- so that a take's leases and the acks that ride with it are a command per set for all its lanes,
-- and a job alone in its topic pays no lease command of its own (docs/how-it-works.md).
--
-- A call of many topics (take.lua) batches its lease writes (lease_batch): each member's last write
-- is kept and all are made at the call's end (leases_flush), one ZADD and one ZREM per set. Reads of
-- a topic's leases flush first. Outside a batch, each write is made at once.

local lease_writes = nil  -- member -> deadline, or false for a removal; nil: no batch

local function lease_batch()
  lease_writes = {}
end

local function lease_member(K, id)
  return K.name .. '/' .. id
end

local function leases_write(leases, lex, writes)
  local adds, lex_adds, removals = {}, {}, {}
  for member, deadline in pairs(writes) do
    if deadline then
      adds[#adds + 1], adds[#adds + 2] = deadline, member
      lex_adds[#lex_adds + 1], lex_adds[#lex_adds + 2] = 0, member
    else
      removals[#removals + 1] = member
    end
  end
  if #removals > 0 then
    redis.call('ZREM', leases, unpack(removals))
    redis.call('ZREM', lex, unpack(removals))
  end
  if #adds > 0 then
    redis.call('ZADD', leases, unpack(adds))
    redis.call('ZADD', lex, unpack(lex_adds))
  end
end

local lease_keys = nil  -- the partition's two sets, once a write of the batch named them

local function leases_flush()
  if lease_writes and next(lease_writes) then
    leases_write(lease_keys[1], lease_keys[2], lease_writes)
  end
  lease_writes = lease_writes and {}
end

local function lease_write(K, member, deadline)
  if lease_writes then
    lease_keys = lease_keys or {K.leases, K.leases_lex}
    lease_writes[member] = deadline
  else
    leases_write(K.leases, K.leases_lex, {[member] = deadline})
  end
end

-- Leases the jobs of `pairs` ({deadline, id, deadline, id ...}) of topic K until their deadlines.
local function lease_add(K, pairs)
  for i = 1, #pairs, 2 do
    lease_write(K, lease_member(K, pairs[i + 1]), pairs[i])
  end
end

-- The jobs `ids` of topic K are no longer leased.
local function lease_remove(K, ids)
  for _, id in ipairs(ids) do
    lease_write(K, lease_member(K, id), false)
  end
end

-- Whether a sorts before b among members of one score, byte by byte, as Redis orders them (Lua's own
-- comparison follows the server's locale).
local function bytes_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

local function leases_range(K)
  return '[' .. K.name .. '/', '(' .. K.name .. '0'
end

-- How many jobs of topic K are leased.
local function lease_count(K)
  leases_flush()
  local from, to = leases_range(K)
  return redis.call('ZLEXCOUNT', K.leases_lex, from, to)
end

-- The ids of topic K's leased jobs and their deadlines, soonest first (a deadline's ids byte by
-- byte, as a sorted set orders them): as many as its consumers' workers.
local function leases_of(K)
  leases_flush()
  local from, to = leases_range(K)
  local members = redis.call('ZRANGE', K.leases_lex, from, to, 'BYLEX')
  local leases = {}
  for first = 1, #members, 1000 do  -- unpack has a limit
    local chunk = {unpack(members, first, math.min(first + 999, #members))}
    for i, deadline in ipairs(redis.call('ZMSCORE', K.leases, unpack(chunk))) do
      leases[#leases + 1] = {id = string.sub(chunk[i], #K.name + 2), deadline = tonumber(deadline) or 0}
    end
  end
  table.sort(leases, function(a, b)
    if a.deadline ~= b.deadline then
      return a.deadline < b.deadline
    end
    return bytes_before(a.id, b.id)
  end)
  return leases
end
