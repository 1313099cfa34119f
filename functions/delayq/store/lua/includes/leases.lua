-- Every lease of a partition is a member `topic/id` (no topic name has a '/') of two sorted sets of
-- the partition (keys.py TOPIC_INDEX_KEYS), whatever its topic:
--   _leased      scored by the lease's deadline (ms): the sweeper takes back the expired from there
--   _leased_lex  scored 0: one topic's leases are the lex range [topic/, (topic0 ('0' follows '/')
-- so that a take's leases and the acks that ride with it are a command per set for all its lanes,
-- and a job alone in its topic pays no lease command of its own (docs/how-it-works.md).
--
-- A call of many topics (take.lua, sweep.lua) batches its lease writes (lease_batch): they are kept
-- and made at the call's end (leases_flush), the removals first, one ZREM and one ZADD per set. A
-- batch never adds a lease it then removes (a take leases no job its acks name). Reads of a topic's
-- leases flush first. Outside a batch, each write is made at once.

local pending = nil  -- the batch's writes: {leases, lex, adds, lex_adds, removals}; nil: no batch

local function lease_batch()
  pending = {adds = {}, lex_adds = {}, removals = {}}
end

local function lease_member(K, id)
  return K.name .. '/' .. id
end

local function lease_write(batch)
  if #batch.removals > 0 then
    redis.call('ZREM', batch.leases, unpack(batch.removals))
    redis.call('ZREM', batch.lex, unpack(batch.removals))
  end
  if #batch.adds > 0 then
    redis.call('ZADD', batch.leases, unpack(batch.adds))
    redis.call('ZADD', batch.lex, unpack(batch.lex_adds))
  end
end

local function leases_flush()
  if pending then
    lease_write(pending)
    lease_batch()
  end
end

-- The writes of topic K: the batch's, or (none open) a batch of their own, written by `done`.
local function lease_writes(K)
  local batch = pending or {adds = {}, lex_adds = {}, removals = {}}
  batch.leases, batch.lex = K.leases, K.leases_lex
  return batch
end

local function lease_done(batch)
  if batch ~= pending then
    lease_write(batch)
  end
end

-- Leases the jobs of `pairs` ({deadline, id, deadline, id ...}) of topic K until their deadlines.
local function lease_add(K, pairs)
  local batch = lease_writes(K)
  local adds, lex_adds = batch.adds, batch.lex_adds
  for i = 1, #pairs, 2 do
    local member = lease_member(K, pairs[i + 1])
    adds[#adds + 1], adds[#adds + 2] = pairs[i], member
    lex_adds[#lex_adds + 1], lex_adds[#lex_adds + 2] = 0, member
  end
  lease_done(batch)
end

-- The jobs `ids` of topic K are no longer leased.
local function lease_remove(K, ids)
  local batch = lease_writes(K)
  for _, id in ipairs(ids) do
    batch.removals[#batch.removals + 1] = lease_member(K, id)
  end
  lease_done(batch)
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

-- The ids of topic K's leased jobs, soonest deadline first.
local function lease_ids(K)
  local ids = {}
  for i, lease in ipairs(leases_of(K)) do
    ids[i] = lease.id
  end
  return ids
end
