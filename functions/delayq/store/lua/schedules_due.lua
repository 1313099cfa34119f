--[[
schedules_due: the schedules of one partition the sweep has work for now (by Redis' time): a pending
occurrence that has fallen due (make the next one), or an outbox whose claim expired (carry it out).
One call per partition and pass, whatever the number of schedules; nothing is changed.

KEYS[1]  the partition's _schedules_due (sorted set: topic/name -> when due, ms)
KEYS[2]  the partition's _schedule_defs (hash)
KEYS[3]  the partition's _schedule_state (hash)
ARGV[1]  at most this many
Returns {now_ms, next_in_ms, then 3 per schedule due: topic/name, its progress or false, its definition or false}
  next_in_ms  ms until the first schedule not returned falls due: 0 when more are due now, -1 none
]]
-- @include time

local now = now_ms()
local limit = tonumber(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit + 1)
local out = {now, -1}
for i = 1, math.min(#due, limit) do
  local name = due[i]
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGET', KEYS[3], name)
  out[#out + 1] = redis.call('HGET', KEYS[2], name)
end
if #due > limit then
  out[2] = 0
else
  local following = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if following[2] then
    out[2] = tonumber(following[2]) - now
  end
end
return out
