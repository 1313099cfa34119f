--[[
topics_due: which topics of a partition a consumer has work in, from the partition's topic index
(topic_index.lua), without visiting the others: those with ready jobs, oldest first, then those
whose next delayed job falls due within `horizon` ms, soonest first. Reads only.

KEYS[1]  the partition's _ready index
KEYS[2]  the partition's _delayed index
ARGV[1]  limit: at most this many topics named
ARGV[2]  horizon in ms
Returns {now_ms, then 2 values per topic: name, ms until it has a job due (0: now)}
  A topic may be named twice (ready, and delayed): the sooner counts.
]]
-- @include time

local now = now_ms()
local limit = tonumber(ARGV[1])
local out = {now}
for _, topic in ipairs(redis.call('ZRANGE', KEYS[1], 0, limit - 1)) do
  out[#out + 1], out[#out + 2] = topic, 0
end
local left = limit - (#out - 1) / 2
if left > 0 then
  local soon = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now + tonumber(ARGV[2]), 'WITHSCORES', 'LIMIT', 0, left)
  for i = 1, #soon, 2 do
    out[#out + 1], out[#out + 2] = soon[i], math.max(0, tonumber(soon[i + 1]) - now)
  end
end
return out
