-- Receipts: a job that succeeded stays as a receipt (its meta in the compact 'd' form, meta.lua; no
-- body, no last error), in the topic's done set scored by when it succeeded, for the topic's
-- keep_done, and at most keep_done_max of them are kept, the oldest forgotten first.
--
-- Forgets up to `limit` receipts: those kept keep_ms or longer, then the oldest beyond keep_max.
-- Bounded whatever the backlog: the ack forgets about as many as it adds, the sweep the rest.
--
-- The ack, which runs for every few jobs, forgets in chunks, so that most acks only look (ZCARD and
-- the oldest receipt): once the oldest receipt is `slack_ms` past its keep_done (then every expired
-- one goes), and once more than keep_max are kept (then `chunk` more than the excess go, at most a
-- sixteenth of keep_max). The sweep, once a tick, forgets exactly (slack and chunk 0).
-- Returns how many it forgot.
local function forget_receipts(K, now, keep_ms, keep_max, limit, slack_ms, chunk)
  local count = redis.call('ZCARD', K.done)
  if count == 0 or limit <= 0 then
    return 0
  end
  local oldest = tonumber(redis.call('ZRANGE', K.done, 0, 0, 'WITHSCORES')[2])
  local expired = oldest <= now - keep_ms - slack_ms
  if not expired and count <= keep_max then
    return 0
  end
  local ids = {}
  if expired then
    ids = redis.call('ZRANGEBYSCORE', K.done, '-inf', now - keep_ms, 'LIMIT', 0, limit)
    if #ids > 0 then
      redis.call('ZREM', K.done, unpack(ids))
    end
  end
  local over = count - #ids - keep_max
  if over > 0 then
    over = math.min(over + math.min(chunk, math.floor(keep_max / 16)), limit - #ids)
    if over > 0 then
      local gone = redis.call('ZRANGE', K.done, 0, over - 1)
      redis.call('ZREM', K.done, unpack(gone))
      for _, id in ipairs(gone) do
        ids[#ids + 1] = id
      end
    end
  end
  if #ids > 0 then
    redis.call('HDEL', K.meta, unpack(ids))
  end
  return #ids
end
