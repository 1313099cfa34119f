--[[
dead: the most recent dead jobs of one topic.

KEYS        the topic's key group (keys.py Partition.key_group)
ARGV[1]     limit
Returns 5 values per job, newest death first: id, died_at_ms, meta, body, last_error
]]
-- @include topic_keys
-- @include jobs

local K = topic_keys(1)
local limit = tonumber(ARGV[1])
if limit < 1 then
  return {}
end
local dead = redis.call('ZREVRANGE', K.dead, 0, limit - 1, 'WITHSCORES')
local out = {}
for i = 1, #dead, 2 do
  local id = dead[i]
  local n = #out
  out[n + 1], out[n + 2] = id, dead[i + 1]
  out[n + 3] = meta_get(K, id)
  out[n + 4] = body_get(K, id)
  out[n + 5] = redis.call('HGET', K.errors, id) or ''
end
return out
