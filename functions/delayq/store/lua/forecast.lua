--[[
forecast: how many of one topic's delayed jobs fall due in each bucket of time from now on.

KEYS[1..17] the topic's keys (keys.py TOPIC_KEYS)
ARGV[1]     bucket length in ms
ARGV[2]     window in ms: the buckets cover [now, now + window), the last one cut short at its end
Returns {now_ms, then one count per bucket}: one ZCOUNT per bucket, O(buckets * log(n))
]]
-- @include time
-- @include topic_keys

local K = topic_keys(1)
local bucket, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local out = {now}
local from = now
while from < now + window do
  local to = math.min(from + bucket, now + window)
  out[#out + 1] = redis.call('ZCOUNT', K.delayed, from, '(' .. to)
  from = to
end
return out
