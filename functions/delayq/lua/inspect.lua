--[[
inspect: read one job, consistently.

KEYS[1..9]  the topic's keys (keys.py TOPIC_KEYS)
ARGV[1]     id
Returns nil when there is no such job, else {state, meta, body, last_error, done_at_ms}
  state  'delayed', 'ready', 'reserved', 'dead' or 'done'; last_error is nil when there is none;
         done_at_ms (when it succeeded) only for a done job, whose body and last error are nil
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
if state == 'l' then
  state = 'reserved'
elseif state == 'x' then
  state = 'dead'
elseif state == 'd' then
  return {'done', raw, false, false, redis.call('ZSCORE', K.done, id)}
elseif redis.call('ZSCORE', K.delayed, id) then
  state = 'delayed'
else
  state = 'ready'
end
return {state, raw, redis.call('HGET', K.bodies, id), redis.call('HGET', K.errors, id)}
