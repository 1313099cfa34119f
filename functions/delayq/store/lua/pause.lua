--[[
pause: pause or resume one topic in this partition. While paused, the take leases nothing
(take.lua); everything else goes on: jobs fall due and the sweep moves them to the ready list, creates
are accepted, leased jobs finish. Idempotent: a second pause keeps the time of the first.

KEYS[1..22] the topic's key group (keys.py Partition.key_group); its _topics set: a paused topic is
            one of the partition's topics, jobs or not
ARGV[1]     '1' pause, '0' resume
ARGV[2]     the topic's name
Returns 1 if the topic is now paused, 0 if not.
]]
-- @include time
-- @include topic_keys

local K = topic_keys(1)
if ARGV[1] == '1' then
  redis.call('SADD', K.topics, ARGV[2])
  redis.call('HSETNX', K.control, 'paused', now_ms())
  return 1
end
redis.call('HDEL', K.control, 'paused')
return 0
