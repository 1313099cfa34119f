--[[
schedule_read: schedules of one partition, each read whole, with Redis' time (what their next runs
are computed from).

KEYS[1]  the partition's _schedule_defs (hash)
KEYS[2]  the partition's _schedule_state (hash)
ARGV     the schedules, topic/name each
Returns {now_ms, then 2 per schedule: its definition (JSON) or false, its progress or false}
]]
-- @include time

local out = {now_ms()}
for _, name in ipairs(ARGV) do
  out[#out + 1] = redis.call('HGET', KEYS[1], name)
  out[#out + 1] = redis.call('HGET', KEYS[2], name)
end
return out
