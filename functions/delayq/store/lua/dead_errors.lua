--[[
dead_errors: a page of one topic's dead jobs in this partition, newest death first, with what each
needs to be grouped by its error: not its body, and of its history only the last attempt.

KEYS        the topic's key group (keys.py Partition.key_group)
ARGV[1]     the rank to start at (0: the newest)
ARGV[2]     how many
Returns the partition's count of dead jobs, then 4 values per job: id, died_at_ms, meta, its history's
last entry ('' where none)
]]
-- @include topic_keys
-- @include history
-- @include jobs

local K = topic_keys(1)
local start, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = { redis.call('ZCARD', K.dead) }
local dead = redis.call('ZREVRANGE', K.dead, start, start + count - 1, 'WITHSCORES')
for i = 1, #dead, 2 do
  local id = dead[i]
  local stored = redis.call('HGET', K.errors, id) or ''
  local n = #out
  out[n + 1], out[n + 2] = id, dead[i + 1]
  out[n + 3] = meta_get(K, id)
  out[n + 4] = string.match(stored, '([^' .. RS .. ']*)$')
end
return out
