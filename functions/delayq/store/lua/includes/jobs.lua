-- Where a job's meta (meta.lua) and its body (or a receipt's result, ack.lua) are kept: a field named
-- by its id in its topic's meta hash and in its topic's bodies hash. Every script reads and writes
-- them here, and nowhere else, so that where they are kept is this file's business alone.
--
-- A call of many topics (take.lua) runs its lanes as a batch (jobs_each): each lane runs as a
-- coroutine, and a lane that reads metas or bodies waits (yields) until every lane has either asked
-- for its reads or finished; then the reads of all lanes are made together, a command per hash, and
-- each lane goes on with its answers. The batch's writes are kept (and seen by its reads) and made at
-- the call's end (jobs_flush), a command per hash and kind.

local batch = nil  -- the open batch: {known = {hash -> {field -> value or false}}, wanted, writes, order}

local function meta_hash(K)
  return K.meta
end

local function body_hash(K)
  return K.bodies
end

local function field_of(_, id)
  return id
end

-- In a batch: what is known of `hash` (fields read or written by the call so far).
local function known_of(hash)
  local known = batch.known[hash]
  if not known then
    known = {}
    batch.known[hash] = known
  end
  return known
end

local ASKED = {}  -- what is known of a field asked for and not read yet

-- Asks, in a batch, for the fields of `ids` of topic K in `hash` that are not known yet. Returns
-- whether any of them is still to be read.
local function want(hash, K, ids)
  local known, wanted, waiting = known_of(hash), batch.wanted[hash], false
  for _, id in ipairs(ids) do
    local field = field_of(K, id)
    if known[field] == nil then
      if not wanted then
        wanted = {}
        batch.wanted[hash] = wanted
      end
      wanted[#wanted + 1] = field
      known[field] = ASKED
    end
    waiting = waiting or known[field] == ASKED
  end
  return waiting
end

-- Makes the reads asked for: a command per hash. A field written since it was asked keeps what was
-- written.
local function fetch()
  for hash, fields in pairs(batch.wanted) do
    local known = batch.known[hash]
    for first = 1, #fields, 1000 do  -- unpack has a limit
      local chunk = {unpack(fields, first, math.min(first + 999, #fields))}
      for i, value in ipairs(redis.call('HMGET', hash, unpack(chunk))) do
        if known[chunk[i]] == ASKED then
          known[chunk[i]] = value
        end
      end
    end
  end
  batch.wanted = {}
end

-- The values of `ids` of topic K in `hash`, in order (false where none).
local function read(hash, K, ids)
  if #ids == 0 then
    return {}
  end
  if not batch then
    local fields = {}
    for i, id in ipairs(ids) do
      fields[i] = field_of(K, id)
    end
    return redis.call('HMGET', hash, unpack(fields))
  end
  if want(hash, K, ids) then
    if coroutine.running() then
      coroutine.yield()  -- jobs_each fetches them with the other lanes' reads
    else
      fetch()
    end
  end
  local known, values = batch.known[hash], {}
  for i, id in ipairs(ids) do
    values[i] = known[field_of(K, id)]
  end
  return values
end

-- Sets (value) or deletes (false) the fields of `values` ({id, value, id, value ...}) of K in `hash`.
local function write(hash, K, values)
  if not batch then
    local sets, deletes = {}, {}
    for i = 1, #values, 2 do
      local field = field_of(K, values[i])
      if values[i + 1] then
        sets[#sets + 1], sets[#sets + 2] = field, values[i + 1]
      else
        deletes[#deletes + 1] = field
      end
    end
    if #deletes > 0 then
      redis.call('HDEL', hash, unpack(deletes))
    end
    if #sets > 0 then
      redis.call('HSET', hash, unpack(sets))
    end
    return
  end
  local writes = batch.writes[hash]
  if not writes then
    writes = {}
    batch.writes[hash] = writes
    batch.order[#batch.order + 1] = hash
  end
  local known = known_of(hash)
  for i = 1, #values, 2 do
    local field = field_of(K, values[i])
    writes[field], known[field] = values[i + 1], values[i + 1]
  end
end

local function deletions(ids)
  local values = {}
  for _, id in ipairs(ids) do
    values[#values + 1], values[#values + 2] = id, false
  end
  return values
end

-- The metas of `ids` of topic K, in order (false where the job is gone).
local function metas_get(K, ids)
  return read(meta_hash(K), K, ids)
end

local function meta_get(K, id)
  return metas_get(K, {id})[1]
end

-- The bodies of `ids` of topic K (a done job's: its result), in order (false where none).
local function bodies_get(K, ids)
  return read(body_hash(K), K, ids)
end

local function body_get(K, id)
  return bodies_get(K, {id})[1]
end

-- The metas and the bodies of `ids` of topic K, in order: in a batch, read in one round.
local function jobs_get(K, ids)
  if batch then
    want(body_hash(K), K, ids)
  end
  return metas_get(K, ids), bodies_get(K, ids)
end

-- Writes the metas of `values` ({id, meta, id, meta ...}) of topic K.
local function metas_set(K, values)
  write(meta_hash(K), K, values)
end

-- Writes the bodies (or results) of `values` ({id, body ...}) of topic K.
local function bodies_set(K, values)
  write(body_hash(K), K, values)
end

local function metas_delete(K, ids)
  write(meta_hash(K), K, deletions(ids))
end

local function bodies_delete(K, ids)
  write(body_hash(K), K, deletions(ids))
end

-- Forgets the jobs `ids` of topic K: their metas and bodies.
local function jobs_delete(K, ids)
  metas_delete(K, ids)
  bodies_delete(K, ids)
end

-- Writes the meta of a new job `id` of topic K unless it exists: true if written. Not in a batch.
local function meta_create(K, id, meta)
  return redis.call('HSETNX', meta_hash(K), field_of(K, id), meta) == 1
end

-- Opens a batch: the job reads and writes until jobs_flush are made together.
local function jobs_batch()
  batch = {known = {}, wanted = {}, writes = {}, order = {}}
end

-- Runs fn(item) for each of `items` (in order, each as far as it goes before it reads), making the
-- reads of all of them together; returns their results, in order.
local function jobs_each(items, fn)
  local threads, results, running = {}, {}, #items
  for i = 1, #items do
    threads[i] = coroutine.create(fn)
  end
  local first = true
  while running > 0 do
    for i, thread in ipairs(threads) do
      if coroutine.status(thread) == 'suspended' then
        local ok, result = coroutine.resume(thread, first and items[i] or nil)
        if not ok then
          error(result, 0)
        end
        if coroutine.status(thread) == 'dead' then
          results[i], running = result, running - 1
        end
      end
    end
    first = false
    fetch()
  end
  return results
end

-- Makes the batch's writes, a command per hash and kind (deletions first), and closes it.
local function jobs_flush()
  for _, hash in ipairs(batch.order) do
    local sets, deletes = {}, {}
    for field, value in pairs(batch.writes[hash]) do
      if value then
        sets[#sets + 1], sets[#sets + 2] = field, value
      else
        deletes[#deletes + 1] = field
      end
    end
    for first = 1, #deletes, 1000 do
      redis.call('HDEL', hash, unpack(deletes, first, math.min(first + 999, #deletes)))
    end
    for first = 1, #sets, 1000 do
      redis.call('HSET', hash, unpack(sets, first, math.min(first + 999, #sets)))
    end
  end
  batch = nil
end
