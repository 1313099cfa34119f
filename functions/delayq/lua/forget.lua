--[[
forget: the sweep's share of forgetting receipts (includes/receipts.lua), so that they expire on
time in topics that no ack visits: in some topics of a partition, receipts kept for their topic's
keep_done or longer, then the oldest beyond its keep_done_max, at most `limit` in all.

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

local now = now_ms()
local budget = tonumber(ARGV[1])
local groups = #KEYS / KEY_GROUP_SIZE
for g = 1, groups do
  if budget <= 0 then
    break
  end
  local K = topic_keys(1 + (g - 1) * KEY_GROUP_SIZE)
  local keep_ms = tonumber(ARGV[2 * g])
  budget = budget - forget_receipts(K, now, keep_ms, tonumber(ARGV[2 * g + 1]), budget, 0, 0)
  local first = first_score(K.done)
  if first then
    redis.call('ZADD', K.receipts_index, first + keep_ms, K.name)
  else
    redis.call('ZREM', K.receipts_index, K.name)
    forget_topic_if_empty(K)
  end
end
local forgotten = tonumber(ARGV[1]) - budget
local more = 0
if budget <= 0 then
  more = 1
end
return {forgotten, more}
