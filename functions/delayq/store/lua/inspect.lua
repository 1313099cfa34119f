--[[
inspect: read one job, consistently.

KEYS[1..17] the topic's keys (keys.py TOPIC_KEYS)
ARGV[1]     id
Returns nil when there is no such job, else {state, meta, body, last_error}
  state  'delayed', 'ready', 'reserved', 'dead' or 'done'; last_error is nil when there is none;
         a done job (a receipt) has neither body nor last error: {'done', meta}
]]
-- @include topic_keys
-- @include meta

local K = topic_keys(1)
local id = ARGV[1]
local raw = redis.call('HGET', K.meta, id)
if not raw then
  return nil
end
local state = meta_decode(raw).state
if state == RESERVED then
  state = 'reserved'
elseif state == DEAD then
  state = 'dead'
elseif state == DONE then
  return {'done', raw}
elseif redis.call('ZSCORE', K.delayed, id) then
  state = 'delayed'
else
  state = 'ready'
end
return {state, raw, redis.call('HGET', K.bodies, id), redis.call('HGET', K.errors, id)}
