--[[
activity_read: the last minutes of one topic's activity (activity.py), the current minute by Redis time
last; a minute without a field is nil.

KEYS[1..n]  consecutive minutes' activity hashes of one partition (keys.py Partition.activity), around
            the current minute as the caller knows it
ARGV[1]     the minute of KEYS[1]
ARGV[2]     how many minutes, the current one included
ARGV[3]     the topic
Returns Redis' time in ms, 1, then the minutes' fields, oldest first; or Redis' time and 0 if KEYS do
not cover those minutes (the caller's estimate was off: it reads again around the time returned).
]]
-- @include time
-- @include minutes

local now = now_ms()
local first, last = wanted_minutes(now, tonumber(ARGV[1]), tonumber(ARGV[2]))
if not first then
  return { now, 0 }
end
local out = { now, 1 }
for i = first, last do
  out[#out + 1] = redis.call('HGET', KEYS[i], ARGV[3])
end
return out
