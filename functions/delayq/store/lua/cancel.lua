--[[
cancel: a job is gone, in whatever state it was (a done job's receipt is forgotten). A leased job that is cancelled is not retried: its
consumer's answer later finds no lease and changes nothing.

KEYS[1..16] the topic's key group (keys.py Partition.key_group)
ARGV[1]     id
ARGV[2]     optional: 'pending' cancels the job only while it waits for its first run-at (delayed,
            never attempted): a schedule's occurrence that has not started yet
Returns 3 cancelled, -2 no such job (with 'pending': none that is pending)
]]
-- @include topic_keys
-- @include meta
-- @include queue
-- @include receipts

local K = topic_keys(1)
local id = ARGV[1]
local raw = redis.call('HGET', K.meta, id)
if not raw then
  return -2
end
local m = meta_decode(raw)
local state = m.state
if ARGV[2] == 'pending' and not (state == QUEUED and m.attempts == '0' and redis.call('ZSCORE', K.delayed, id)) then
  return -2
end
if state == QUEUED then
  unqueue(K, id)
elseif state == RESERVED then
  redis.call('ZREM', K.leased, id)
  index_leased_exact(K)
elseif state == DONE then
  remove_receipt(K, id)
else
  redis.call('ZREM', K.dead, id)
end
redis.call('HDEL', K.meta, id)
redis.call('HDEL', K.bodies, id)
redis.call('HDEL', K.errors, id)
forget_topic_if_empty(K)
return 3
