--[[
cancel: a job is gone, in whatever state it was (a done job's receipt is forgotten). A leased job that is cancelled is not retried: its
consumer's answer later finds no lease and changes nothing.

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
ARGV[1]     id
ARGV[2]     optional: 'pending' cancels the job only while it waits for its first run-at (delayed,
            never attempted): a schedule's occurrence that has not started yet; 'delayed', 'ready'
            or 'dead' only while it is in that state (a bulk cancel's, listed first)
Returns 3 cancelled, -2 no such job (with ARGV[2]: none in that state)
]]
-- @include topic_keys
-- @include meta
-- @include leases
-- @include queue
-- @include receipts
-- @include jobs

local K = topic_keys(1)
local id = ARGV[1]
local raw = meta_get(K, id)
if not raw then
  return -2
end
local m = meta_decode(raw)
local state = m.state
local only = ARGV[2]
if only and only ~= '' then
  local delayed = state == QUEUED and redis.call('ZSCORE', K.delayed, id)
  local pending = only == 'pending' and delayed and m.attempts == '0'
  local in_state = (only == 'delayed' and delayed) or (only == 'ready' and state == QUEUED and not delayed)
    or (only == 'dead' and state == DEAD)
  if not (pending or in_state) then
    return -2
  end
end
if state == QUEUED then
  unqueue(K, id, m)
elseif state == RESERVED then
  lease_remove(K, {id})
  flow_release(K, {m.key})
elseif state == DONE then
  remove_receipt(K, id)
else
  redis.call('ZREM', K.dead, id)
end
jobs_delete(K, {id})
redis.call('HDEL', K.errors, id)
forget_topic_if_empty(K)
return 3
