--[[
lateness_read: the recent lateness of topics whose activity is kept in this partition (see
lateness.py): per topic, its deliveries per bucket, summed over the minutes of the window (by Redis
time), so that a topic quiet for part of the window shows only what is left in it.

KEYS[1..n]  consecutive minutes' activity hashes of one partition (keys.py Partition.activity), around
            the current minute as the caller knows it
ARGV[1]     the minute of KEYS[1]
ARGV[2]     the window, in whole minutes before the current one
ARGV[3..]   the topics
Returns Redis' time in ms, 1, then per topic, in order, a flat list: bucket, deliveries, bucket,
deliveries ...; or Redis' time and 0 if KEYS do not cover the window (as activity_read.lua).
]]
-- @include time
-- @include minutes

local now = now_ms()
local first, last = wanted_minutes(now, tonumber(ARGV[1]), tonumber(ARGV[2]) + 1)  -- the window and now's
if not first then
  return { now, 0 }
end
local topics = {}
for i = 3, #ARGV do
  topics[#topics + 1] = ARGV[i]
end
local sums, order = {}, {}
for t = 1, #topics do
  sums[t], order[t] = {}, {}
end
for k = first, last do
  for t, counts in ipairs(redis.call('HMGET', KEYS[k], unpack(topics))) do
    if counts then
      for bucket, n in string.gmatch(counts, '(%d+)=(%d+)') do
        if sums[t][bucket] == nil then
          sums[t][bucket] = 0
          order[t][#order[t] + 1] = bucket
        end
        sums[t][bucket] = sums[t][bucket] + tonumber(n)
      end
    end
  end
end
local out = { now, 1 }
for t = 1, #topics do
  local flat = {}
  for _, bucket in ipairs(order[t]) do
    flat[#flat + 1] = tonumber(bucket)
    flat[#flat + 1] = sums[t][bucket]
  end
  out[t + 2] = flat
end
return out
