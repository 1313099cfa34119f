--[[
schedule_list: a page of a partition's schedules in name order (topic/name), each read whole, with
Redis' time. Bounded: at most ARGV[3] schedules per call; the caller asks for the next page from
the last name it got.

KEYS[1]  the partition's _schedules (sorted set of topic/name, all scores 0)
KEYS[2]  the partition's _schedule_defs (hash)
KEYS[3]  the partition's _schedule_state (hash)
ARGV[1]  the first name, as ZRANGE BYLEX takes it ('-', '[a/', '(a/x')
ARGV[2]  the last name, likewise ('+', '(a0')
ARGV[3]  at most this many
Returns {now_ms, then 3 per schedule: topic/name, its definition (JSON), its progress or false}
]]
-- @include time

local out = {now_ms()}
local names = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'BYLEX', 'LIMIT', 0, tonumber(ARGV[3]))
for _, name in ipairs(names) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGET', KEYS[2], name)
  out[#out + 1] = redis.call('HGET', KEYS[3], name)
end
return out
