-- Where a queued job waits: the delayed set until its run-at, the tail of the ready list once due.

local function place(K, id, run_at, now)
  if run_at <= now then
    redis.call('RPUSH', K.ready, id)
  else
    redis.call('ZADD', K.delayed, run_at, id)
  end
end

local function unqueue(K, id)
  if redis.call('ZREM', K.delayed, id) == 0 then
    redis.call('LREM', K.ready, 1, id)
  end
end

-- Takes up to `limit` due jobs out of the delayed set and returns their ids, earliest first.
local function take_due(K, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', K.delayed, '-inf', now, 'LIMIT', 0, limit)
  if #ids > 0 then
    redis.call('ZREM', K.delayed, unpack(ids))
  end
  return ids
end

-- Moves up to `limit` due jobs from the delayed set to the tail of the ready list; returns how many.
local function promote(K, now, limit)
  if limit <= 0 then
    return 0
  end
  local ids = take_due(K, now, limit)
  if #ids > 0 then
    redis.call('RPUSH', K.ready, unpack(ids))
  end
  return #ids
end

-- The score of the first member of a sorted set, or nil.
local function first_score(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then
    return tonumber(first[2])
  end
  return nil
end
