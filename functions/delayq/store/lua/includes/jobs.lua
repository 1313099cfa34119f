-- Where a job's meta (meta.lua) and its body (or a receipt's result, ack.lua) are kept: a field
-- `topic/id` (no topic name has a '/') of the partition's _metas hash and of its _bodies hash,
-- whatever the topic (keys.py TOPIC_INDEX_KEYS). Every script reads and writes them here, and nowhere
-- else. One pair of hashes per partition rather than per topic, so that a call about many topics (a
-- take of jobs alone in their topics) reads and writes the jobs of all of them with a command per
-- hash (docs/how-it-works.md).
--
-- A call of many topics (take.lua) runs its lanes as a batch (jobs_each): each lane runs as a
-- coroutine, and a lane that reads metas or bodies waits (yields) until every lane has either asked
-- for its reads or finished; then the reads of all lanes are made together, a command per hash, and
-- each lane goes on with its answers. The batch's writes are kept (and seen by its reads) and made at
-- the call's end (jobs_flush), a command per hash and kind. Its bookkeeping is a few table writes per
-- job: less than the commands it saves only where lanes are many, so a call of one lane has none.
--
-- A version before these hashes kept each topic's jobs in hashes of the topic's own (field: the id),
-- and the sweeper moves them (move_jobs.lua). Until this process knows a partition holds none there
-- (keys.py key_group; K.old_meta and K.old_bodies are nil then), a job not found here is looked for
-- there, and a job written or deleted here is deleted there, so that no older copy outlives it.

-- The open batch: its reads asked (requests), its writes (hash -> field -> value, false: deleted) in
-- the order of their hashes, the ids to delete from topics' own hashes (topic hash -> ids).
local batch = nil

local function meta_hash(K)
  return K.metas
end

local function body_hash(K)
  return K.bodies
end

-- A job's field, made once per call and topic (a string made is hashed and interned: a take reads
-- and writes each job's fields several times).
local function field_of(K, id)
  local fields = K.fields
  if not fields then
    fields = {}
    K.fields = fields
  end
  local field = fields[id]
  if not field then
    field = K.name .. '/' .. id
    fields[id] = field
  end
  return field
end

-- Topic K's own hash of the kind of `hash` (nil: no job can be left there).
local function old_of(K, hash)
  if hash == K.metas then
    return K.old_meta
  end
  return K.old_bodies
end

-- The values of `old` for the ids whose values are false in `values`, filled in.
local function fill_from_old(old, ids, values)
  local missing, at = {}, {}
  for i, value in ipairs(values) do
    if not value then
      missing[#missing + 1], at[#at + 1] = ids[i], i
    end
  end
  if #missing > 0 then
    for j, value in ipairs(redis.call('HMGET', old, unpack(missing))) do
      values[at[j]] = value
    end
  end
end

-- In a batch, asks for the values of `ids` of topic K in `hash`: a request, answered by fetch.
local function ask(hash, K, ids)
  local asked = batch.asked[hash]
  if not asked then
    asked = {fields = {}, requests = {}}
    batch.asked[hash] = asked
    batch.waiting = true
  end
  local fields, from = asked.fields, #asked.fields
  for i, id in ipairs(ids) do
    fields[from + i] = field_of(K, id)
  end
  local request = {from = from, K = K, ids = ids}
  asked.requests[#asked.requests + 1] = request
  return request
end

-- Answers the requests asked: a command per hash for all of them (and, for jobs not found, one per
-- topic hash they may be left in). A field this batch wrote reads as written.
local function fetch()
  if not batch.waiting then
    return
  end
  for hash, asked in pairs(batch.asked) do
    local fields, values = asked.fields, nil
    if #fields <= 1000 then  -- unpack has a limit
      values = redis.call('HMGET', hash, unpack(fields))
    else
      values = {}
      for first = 1, #fields, 1000 do
        local got = redis.call('HMGET', hash, unpack(fields, first, math.min(first + 999, #fields)))
        for i = 1, #got do
          values[first + i - 1] = got[i]
        end
      end
    end
    local written = batch.writes[hash]
    for _, request in ipairs(asked.requests) do
      local answer, from = {}, request.from
      for i = 1, #request.ids do
        local value = values[from + i]
        if written then
          local mine = written[fields[from + i]]
          if mine ~= nil then
            value = mine
          end
        end
        answer[i] = value
      end
      local old = old_of(request.K, hash)
      if old then
        fill_from_old(old, request.ids, answer)
      end
      request.answer = answer
    end
  end
  batch.asked, batch.waiting = {}, false
end

-- Waits for the batch's reads asked: in a lane, until jobs_each fetches them with the other lanes'
-- reads; else fetched at once.
local function await()
  if coroutine.running() then
    coroutine.yield()
  else
    fetch()
  end
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
    local values = redis.call('HMGET', hash, unpack(fields))
    local old = old_of(K, hash)
    if old then
      fill_from_old(old, ids, values)
    end
    return values
  end
  local request = ask(hash, K, ids)
  await()
  return request.answer
end

-- Sets (value) or deletes (false) the fields of `values` ({id, value, id, value ...}) of K in `hash`.
local function write(hash, K, values)
  local old = old_of(K, hash)
  local old_ids = nil
  if old then
    old_ids = {}
    for i = 1, #values, 2 do
      old_ids[#old_ids + 1] = values[i]
    end
  end
  if not batch then
    local sets, deletes = nil, nil  -- made when needed: most writes are all sets or all deletions
    for i = 1, #values, 2 do
      local field = field_of(K, values[i])
      if values[i + 1] then
        sets = sets or {}
        sets[#sets + 1], sets[#sets + 2] = field, values[i + 1]
      else
        deletes = deletes or {}
        deletes[#deletes + 1] = field
      end
    end
    if deletes then
      redis.call('HDEL', hash, unpack(deletes))
    end
    if sets then
      redis.call('HSET', hash, unpack(sets))
    end
    if old_ids and #old_ids > 0 then
      redis.call('HDEL', old, unpack(old_ids))
    end
    return
  end
  local writes = batch.writes[hash]
  if not writes then
    writes = {}
    batch.writes[hash] = writes
    batch.order[#batch.order + 1] = hash
  end
  for i = 1, #values, 2 do
    writes[field_of(K, values[i])] = values[i + 1]
  end
  if old_ids and #old_ids > 0 then
    local list = batch.old[old]
    if not list then
      list = {}
      batch.old[old] = list
      batch.order[#batch.order + 1] = old
    end
    for _, id in ipairs(old_ids) do
      list[#list + 1] = id
    end
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

-- One job's value in `hash` (false where none).
local function read_one(hash, K, id)
  if batch then
    return read(hash, K, {id})[1]
  end
  local value = redis.call('HGET', hash, field_of(K, id))
  local old = not value and old_of(K, hash)
  if old then
    value = redis.call('HGET', old, id)
  end
  return value
end

local function meta_get(K, id)
  return read_one(meta_hash(K), K, id)
end

-- The bodies of `ids` of topic K (a done job's: its result), in order (false where none).
local function bodies_get(K, ids)
  return read(body_hash(K), K, ids)
end

local function body_get(K, id)
  return read_one(body_hash(K), K, id)
end

-- The metas and the bodies of `ids` of topic K, in order: in a batch, read in one round.
local function jobs_get(K, ids)
  if not batch or #ids == 0 then
    return metas_get(K, ids), bodies_get(K, ids)
  end
  local metas, bodies = ask(meta_hash(K), K, ids), ask(body_hash(K), K, ids)
  await()
  return metas.answer, bodies.answer
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
  if K.old_meta and redis.call('HGET', K.old_meta, id) then
    return false
  end
  return redis.call('HSETNX', meta_hash(K), field_of(K, id), meta) == 1
end

-- Opens a batch: the job reads and writes until jobs_flush are made together.
local function jobs_batch()
  batch = {asked = {}, waiting = false, writes = {}, order = {}, old = {}}
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
    local sets, deletes = {}, batch.old[hash] or {}
    for field, value in pairs(batch.writes[hash] or {}) do
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
