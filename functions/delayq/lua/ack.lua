--[[
ack: jobs of one topic whose handler succeeded are done: kept as receipts (includes/receipts.lua)
for the topic's keep_done, or gone at once when it is 0.

A job is acknowledged only while it is still leased with the given token: the late answer of an
attempt whose lease expired (and that may be leased again by now), or of a cancelled job, changes
nothing. Once the topic keeps more than its keep_done_max receipts, the call forgets the oldest, in
chunks (at most FORGET_MORE more than it acknowledges jobs): bounded work; the sweep forgets the
expired (forget.lua).

KEYS[1..14] the topic's key group (keys.py Partition.key_group)
ARGV[1]     keep_done in ms: how long a receipt is kept; 0 keeps none
ARGV[2]     keep_done_max: at most this many receipts are kept
then 3 values per job: id, lease token, started_at_ms (when the attempt's handler started, Redis time)
Returns the number of jobs acknowledged.
]]
-- @include time
-- @include topic_keys
-- @include receipts
-- @include topic_index

local FORGET_MORE = 64  -- receipts forgotten beyond the jobs acknowledged, at most: the chunk

local K = topic_keys(1)
local keep_ms, keep_max = tonumber(ARGV[1]), tonumber(ARGV[2])
local ids = {}
for i = 3, #ARGV, 3 do
  ids[#ids + 1] = ARGV[i]
end
local now = now_ms()
local suffix = ':' .. now  -- each receipt's lease field: 'started_at:done_at'
local done, receipts = {}, {}
if #ids > 0 then
  local metas = redis.call('HMGET', K.meta, unpack(ids))
  for i, id in ipairs(ids) do
    local raw = metas[i]
    if raw then
      -- Matched as text (meta.lua): 'l|attempts|run_at|enqueued_at|token|overrides' becomes
      -- 'd|attempts|run_at|enqueued_at|started_at:done_at|overrides'.
      local head, token, overrides = string.match(raw, '^l(|%d+|%d+|%d+|)([^|]+)(|.*)$')
      if token == ARGV[3 * i + 1] then
        done[#done + 1] = id
        if keep_ms > 0 then
          receipts[#receipts + 1] = id
          receipts[#receipts + 1] = 'd' .. head .. ARGV[3 * i + 2] .. suffix .. overrides
        end
      end
    end
  end
end
if #done > 0 then
  redis.call('ZREM', K.leased, unpack(done))
  redis.call('HDEL', K.bodies, unpack(done))
  redis.call('HDEL', K.errors, unpack(done))
  index_leased_exact(K)
  if keep_ms > 0 then
    redis.call('HSET', K.meta, unpack(receipts))
    if push_receipts(K, done) == #done then  -- the first receipts: else the index has an earlier one
      index_receipts(K, now + keep_ms)
    end
  else
    redis.call('HDEL', K.meta, unpack(done))
    forget_topic_if_empty(K)
  end
end
forget_receipts(K, now, keep_ms, keep_max, #done + FORGET_MORE, false, FORGET_MORE)
return #done
