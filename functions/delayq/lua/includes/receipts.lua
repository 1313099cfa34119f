-- Receipts: a job that succeeded stays as a receipt (its meta in the compact 'd' form, meta.lua; no
-- body, no last error), in the topic's done set scored by when it succeeded, for the topic's
-- keep_done, and at most keep_done_max of them are kept, the oldest forgotten first.
--
-- Forgets up to `limit` receipts: those kept keep_ms or longer, then the oldest beyond keep_max.
-- Bounded whatever the backlog: the ack forgets about as many as it adds, the sweep the rest.
-- Returns how many it forgot.
-- @include topic_index
-- The partition's receipts index then holds when the topic's first receipt left expires.
local function forget_receipts(K, now, keep_ms, keep_max, limit)
  local ids = redis.call('ZRANGEBYSCORE', K.done, '-inf', now - keep_ms, 'LIMIT', 0, limit)
  if #ids > 0 then
    redis.call('ZREM', K.done, unpack(ids))
  end
  local over = math.min(redis.call('ZCARD', K.done) - keep_max, limit - #ids)
  if over > 0 then
    local popped = redis.call('ZPOPMIN', K.done, over)
    for i = 1, #popped, 2 do
      ids[#ids + 1] = popped[i]
    end
  end
  if #ids > 0 then
    redis.call('HDEL', K.meta, unpack(ids))
    local first = first_score(K.done)
    if first then
      redis.call('ZADD', K.receipts_index, first + keep_ms, K.name)
    else
      redis.call('ZREM', K.receipts_index, K.name)
    end
  end
  return #ids
end
