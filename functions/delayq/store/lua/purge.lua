--[[
purge: delete dead jobs of one topic for good, oldest deaths first.

KEYS        the topic's key group (keys.py Partition.key_group)
ARGV[1]     limit: at most this many in this call
Returns the number purged; call again until it returns 0.
]]
-- @include topic_keys
-- @include jobs

local K = topic_keys(1)
local limit = tonumber(ARGV[1])
if limit < 1 then
  return 0
end
local ids = redis.call('ZRANGE', K.dead, 0, limit - 1)
if #ids > 0 then
  redis.call('ZREM', K.dead, unpack(ids))
  jobs_delete(K, ids)
  redis.call('HDEL', K.errors, unpack(ids))
end
return #ids
