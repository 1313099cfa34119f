--[[
keys_walk: one step of a walk over a topic's jobs in this partition (HSCAN of its meta hash, bounded
work per call), counting each flow key's jobs by state; the callers walk until the cursor is '0'.
With ARGV[3], only that key's jobs count. A queued job is delayed until its run-at, ready from then.
Then, on the first step (cursor '0'), the keys with settings of their own and the keys held.

KEYS[1..17] the topic's keys (keys.py TOPIC_KEYS)
ARGV[1]     the HSCAN cursor ('0' to start)
ARGV[2]     metas read per call, about; 0: none (the first step's settings and holds alone)
ARGV[3]     a key, or '' for every key
Returns {next_cursor, now_ms, then 4 values per key with jobs: key, delayed, ready, reserved,
         then (first step only) '', then 3 values per key with settings or a hold: key, settings
         (KeyLimits.encode, '' for none), held_until_ms ('' for none)}
]]
-- @include time
-- @include topic_keys
-- @include meta

local K = topic_keys(1)
local now = now_ms()
local only = ARGV[3]
local step = {'0', {}}  -- no metas asked for: the keys' own settings and holds alone
if tonumber(ARGV[2]) > 0 then
  step = redis.call('HSCAN', K.meta, ARGV[1], 'COUNT', tonumber(ARGV[2]))
end
local counts, order = {}, {}
local fields = step[2]
for i = 1, #fields, 2 do
  local raw = fields[i + 1]
  local key = meta_key(raw)
  if key ~= '' and (only == '' or key == only) then
    local state = string.sub(raw, 1, 1)
    local slot
    if state == QUEUED then
      slot = 1
      if tonumber(string.match(raw, '^%a|%d+|(%d+)|')) <= now then
        slot = 2
      end
    elseif state == RESERVED then
      slot = 3
    end
    if slot then
      local c = counts[key]
      if not c then
        c = {0, 0, 0}
        counts[key] = c
        order[#order + 1] = key
      end
      c[slot] = c[slot] + 1
    end
  end
end
local out = {step[1], now}
for _, key in ipairs(order) do
  local c = counts[key]
  out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = key, c[1], c[2], c[3]
end
if ARGV[1] == '0' then
  out[#out + 1] = ''
  local held = {}
  local with_held = redis.call('ZRANGEBYSCORE', K.held, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #with_held, 2 do
    held[with_held[i]] = with_held[i + 1]
  end
  local settings = {}
  if only ~= '' then
    settings[only] = redis.call('HGET', K.flows, only)
    held = {[only] = held[only]}
  else
    local all = redis.call('HGETALL', K.flows)
    for i = 1, #all, 2 do
      settings[all[i]] = all[i + 1]
    end
  end
  local named = {}
  for key in pairs(settings) do
    named[key] = true
  end
  for key in pairs(held) do
    named[key] = true
  end
  for key in pairs(named) do
    out[#out + 1], out[#out + 2], out[#out + 3] = key, settings[key] or '', held[key] or ''
  end
end
return out
