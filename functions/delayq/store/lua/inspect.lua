--[[
inspect: read one job, consistently.

KEYS        the topic's key group (keys.py Partition.key_group)
ARGV[1]     id
Returns nil when there is no such job, else {state, meta, body, history, dead_at_ms}
  state    'delayed', 'ready', 'reserved', 'dead' or 'done'
  body     a done job's (a receipt's) is its result as stored (core/job.py encode_result), nil: none
  history  its failed attempts (includes/history.lua), nil when none failed
  dead_at  when a dead job went dead (ms), else nil
]]
-- @include topic_keys
-- @include meta
-- @include jobs

local K = topic_keys(1)
local id = ARGV[1]
local raw = meta_get(K, id)
if not raw then
  return nil
end
local state = meta_decode(raw).state
if state == RESERVED then
  state = 'reserved'
elseif state == DEAD then
  state = 'dead'
elseif state == DONE then
  return {'done', raw, body_get(K, id), redis.call('HGET', K.errors, id)}
elseif redis.call('ZSCORE', K.delayed, id) then
  state = 'delayed'
else
  state = 'ready'
end
local dead_at = state == 'dead' and redis.call('ZSCORE', K.dead, id)
return {state, raw, body_get(K, id), redis.call('HGET', K.errors, id), dead_at}
