--[[
key_settings: set or clear one flow key's own settings in this partition (core/flows.py KeyLimits),
and with them its hold when cleared. The key's parked jobs are looked at again by the next take, under
the new settings (includes/flow.lua). A topic with keys that have settings is one of the partition's
topics, jobs or not, as a paused topic is.

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
ARGV[1]     the key
ARGV[2]     its settings as KeyLimits.encode gives them for this partition; '' to clear them (and
            its hold: back to the topic's defaults)
Returns 1
]]
-- @include topic_keys
-- @include topic_index

local K = topic_keys(1)
local key = ARGV[1]
if ARGV[2] == '' then
  redis.call('HDEL', K.flows, key)
  redis.call('ZREM', K.held, key)
  if redis.call('HLEN', K.flows) == 0 then
    redis.call('HDEL', K.control, 'flows')
    forget_topic_if_empty(K)
  end
else
  redis.call('HSET', K.flows, key, ARGV[2])
  redis.call('HSET', K.control, 'flows', 1)
  redis.call('SADD', K.topics, K.name)
end
redis.call('ZADD', K.wake, 'XX', 0, key)
return 1
