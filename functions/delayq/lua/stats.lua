--[[
stats: how many jobs of one topic are in each state in this partition, and when the next falls due.

KEYS[1..7]  the topic's keys (keys.py TOPIC_KEYS)
Returns {delayed, ready, reserved, dead, next_run_at_ms (-1 if none)}
]]
-- @include topic_keys
-- @include queue

local K = topic_keys(1)
return {
  redis.call('ZCARD', K.delayed), redis.call('LLEN', K.ready), redis.call('ZCARD', K.leased),
  redis.call('ZCARD', K.dead), first_score(K.delayed) or -1,
}
