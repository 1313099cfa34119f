--[[
forget: the sweep's share of forgetting receipts (includes/receipts.lua), so that they expire on
time: in some topics of a partition, the oldest receipts beyond the topic's keep_done_max, and those
kept for its keep_done or longer, at most `limit` in all.

KEYS[1 ...]  a key group per topic (keys.py Partition.key_group): the partition's _receipts index
             is set to when each topic's first receipt left expires (a topic left out for the
             limit keeps its entry: the next sweep comes back for it)
ARGV[1]      limit: at most this many receipts forgotten in this call
then 2 values per topic group: the topic's keep_done in ms, its keep_done_max
Returns {forgotten, more}
  more  1 if the limit was reached: more may be left to forget
]]
-- @include time
-- @include topic_keys
-- @include receipts
-- @include topic_index
-- @include jobs

local HEAD_SCAN = 16  -- receipts read past holes to find the first
local now = now_ms()
local budget = tonumber(ARGV[1])
local groups = #KEYS / KEY_GROUP_SIZE
for g = 1, groups do
  if budget <= 0 then
    break
  end
  local K = topic_keys(1 + (g - 1) * KEY_GROUP_SIZE)
  local keep_ms = tonumber(ARGV[2 * g])
  budget = budget - forget_receipts(K, now, keep_ms, tonumber(ARGV[2 * g + 1]), budget, true, 0)
  -- The index: when the first receipt left expires (a topic whose head is all holes comes back soon).
  local head = redis.call('LRANGE', K.done, 0, HEAD_SCAN - 1)
  if #head == 0 then
    redis.call('ZREM', K.receipts_index, K.name)
    forget_topic_if_empty(K)
  else
    local at = now
    for _, id in ipairs(head) do
      if id ~= '' then
        at = (done_at_of(meta_get(K, id) or '') or now - keep_ms) + keep_ms
        break
      end
    end
    redis.call('ZADD', K.receipts_index, at, K.name)
  end
end
local forgotten = tonumber(ARGV[1]) - budget
local more = 0
if budget <= 0 then
  more = 1
end
return {forgotten, more}
