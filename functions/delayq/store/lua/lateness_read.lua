--[[
lateness_read: the recent lateness of topics whose activity hashes are in this partition (see
lateness.py): per topic, its deliveries per bucket, summed over the minutes of the window (by Redis
time), so that a topic quiet for part of the window shows only what is left in it.

KEYS     the topics' activity hashes (keys.py)
ARGV[1]  the window, in whole minutes before the current one
Returns per key, in order, a flat list: bucket, deliveries, bucket, deliveries ...
]]
-- @include time

local minute = math.floor(now_ms() / 60000)
local minutes = {}
for at = minute - tonumber(ARGV[1]), minute do
  minutes[#minutes + 1] = at
end
local out = {}
for k, key in ipairs(KEYS) do
  local sums, order = {}, {}
  for _, counts in ipairs(redis.call('HMGET', key, unpack(minutes))) do
    if counts then
      for bucket, n in string.gmatch(counts, '(%d+)=(%d+)') do
        if sums[bucket] == nil then
          sums[bucket] = 0
          order[#order + 1] = bucket
        end
        sums[bucket] = sums[bucket] + tonumber(n)
      end
    end
  end
  local flat = {}
  for _, bucket in ipairs(order) do
    flat[#flat + 1] = tonumber(bucket)
    flat[#flat + 1] = sums[bucket]
  end
  out[k] = flat
end
return out
