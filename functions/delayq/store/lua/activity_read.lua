--[[
activity_read: the last minutes of one topic's activity (activity.py), the current minute by Redis time
last; a minute without a field is nil.

KEYS[1]  the topic's activity hash (keys.py)
ARGV[1]  how many minutes, the current one included
Returns Redis' time in ms, then the minutes' fields, oldest first.
]]
-- @include time

local now = now_ms()
local minute = math.floor(now / 60000)
local minutes = {}
for at = minute - tonumber(ARGV[1]) + 1, minute do
  minutes[#minutes + 1] = at
end
local fields = redis.call('HMGET', KEYS[1], unpack(minutes))
local out = { now }
for i = 1, #minutes do
  out[i + 1] = fields[i]
end
return out
