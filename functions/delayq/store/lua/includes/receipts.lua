-- Receipts: a job that succeeded stays as a receipt for the topic's keep_done, at most keep_done_max
-- of them, the oldest forgotten first. Its meta takes the compact 'd' form (meta.lua: no body;
-- 'started_at:done_at' in the lease field), its result takes its body's place (ack.lua), the
-- history of its failed attempts stays (history.lua),
-- and its id is pushed at the tail of the topic's done list, which holds the receipts in the order
-- they were made, oldest at the head.
--
-- A list, not a sorted set: a receipt is made at every success, and pushing at a list's tail and
-- trimming its head cost next to nothing, where a sorted set of thousands costs a walk of its
-- skiplist for every insert and every removal (the hot path's cost, measured in bench/probes/receipts_cost.py).
-- A receipt forgotten before its turn (cancelled, or replaced by a PUT) leaves a hole ('') instead
-- of being removed, as in the ready list (queue.lua), so that positions hold: a receipt's position,
-- done_head + its index (control 'done_head' counts the entries ever removed from the head), never
-- changes, and a listing's cursor can be one (jobs_done.lua). Counted at the head, where receipts
-- leave in chunks, rather than at the tail, where each ack pushes: the ack writes no counter.
-- Control 'done_holes' counts the holes.
-- @include meta
-- @include jobs

-- The receipts of `ids`, made: pushed at the tail of the done list. Returns the list's length.
local function push_receipts(K, ids)
  return redis.call('RPUSH', K.done, unpack(ids))
end

-- A receipt forgotten before its turn: popped when it is the head, else left as a hole. The caller
-- deletes its meta.
local function remove_receipt(K, id)
  local at = redis.call('LPOS', K.done, id)
  if at == 0 then
    redis.call('LPOP', K.done)
    redis.call('HINCRBY', K.control, 'done_head', 1)
  elseif at then
    redis.call('LSET', K.done, at, '')
    redis.call('HINCRBY', K.control, 'done_holes', 1)
  end
end

-- When a receipt's job succeeded (ms), from its meta.
local function done_at_of(raw)
  return tonumber(string.match(raw, RECEIPT_DONE_AT))
end

-- Forgets up to `limit` receipts from the head of the done list: beyond keep_max, the oldest; and,
-- with `expire`, those kept keep_ms or longer. `chunk`: once over keep_max, forget that many more
-- (at most a sixteenth of keep_max), so that not every call has to. Holes met are dropped too, at
-- most `limit` of them. Bounded whatever the backlog: the ack forgets what is over the cap (about as
-- many as it adds, without reading the receipts), the sweep the expired too. `length`: the done
-- list's length, if the caller knows it (push_receipts answers it). Returns how many receipts it
-- forgot.
local function forget_receipts(K, now, keep_ms, keep_max, limit, expire, chunk, length)
  length = length or redis.call('LLEN', K.done)
  if length == 0 or limit <= 0 then
    return 0
  end
  local over = length - keep_max  -- a list no longer than the cap holds no more receipts than it
  if over > 0 then
    over = over - (tonumber(redis.call('HGET', K.control, 'done_holes')) or 0)
  end
  if over > 0 then
    over = math.min(limit, over + math.min(chunk, math.floor(keep_max / 16)))
  elseif not expire then
    return 0
  end
  local gone, cut, dropped = {}, 0, 0
  -- The oldest beyond the cap, whatever their age: no need to read them.
  while #gone < over and dropped < limit do
    local entries = redis.call('LRANGE', K.done, cut, cut + over - #gone - 1)
    if #entries == 0 then
      break
    end
    for _, id in ipairs(entries) do
      if id == '' then
        dropped = dropped + 1
      else
        gone[#gone + 1] = id
      end
    end
    cut = cut + #entries
  end
  -- Then, for the sweep, the expired: read in order until one is not, a few first (most passes find
  -- none), twice as many each time after.
  local batch = 8
  while expire and #gone < limit and dropped < limit do
    local entries = redis.call('LRANGE', K.done, cut, cut + math.min(batch, limit - #gone) - 1)
    batch = batch * 2
    local ids = {}
    for _, id in ipairs(entries) do
      if id ~= '' then
        ids[#ids + 1] = id
      end
    end
    local metas = #ids > 0 and metas_get(K, ids) or {}
    local n, fresh = 0, false
    for _, id in ipairs(entries) do
      if id == '' then
        dropped = dropped + 1
      else
        n = n + 1
        local at = metas[n] and done_at_of(metas[n])
        if at and at > now - keep_ms then
          fresh = true
          break
        end
        gone[#gone + 1] = id
      end
      cut = cut + 1
    end
    if fresh or #entries == 0 then
      break
    end
  end
  if cut > 0 then
    redis.call('LTRIM', K.done, cut, -1)
    redis.call('HINCRBY', K.control, 'done_head', cut)
  end
  if dropped > 0 then
    redis.call('HINCRBY', K.control, 'done_holes', -dropped)
  end
  if #gone > 0 then
    jobs_delete(K, gone)  -- their results (ack.lua)
    redis.call('HDEL', K.errors, unpack(gone))  -- the history of their failed attempts (history.lua)
  end
  return #gone
end
