--[[
reschedule: give a queued job (delayed, or ready and not yet taken) a new run-at.

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
ARGV[1]     id
ARGV[2]     'd': ARGV[3] is a delay in ms from now; 'a': ARGV[3] is epoch ms (the past means now);
            'n': now (run now), but a job already due keeps its run-at and its place
ARGV[3]     value
Returns {code, run_at_ms}
  code  3 rescheduled, -2 no such job, -3 reserved (leased to a consumer), -4 dead, -8 done (a receipt)
]]
-- @include time
-- @include topic_keys
-- @include meta
-- @include queue
-- @include jobs

local K = topic_keys(1)
local id = ARGV[1]
local raw = meta_get(K, id)
if not raw then
  return {-2, 0}
end
local m = meta_decode(raw)
if m.state == RESERVED then
  return {-3, 0}
elseif m.state == DEAD then
  return {-4, 0}
elseif m.state == DONE then
  return {-8, 0}
end

local now = now_ms()
local run_at = tonumber(ARGV[3])
if ARGV[2] == 'n' then
  if tonumber(m.run_at) <= now then
    return {3, tonumber(m.run_at)}
  end
  run_at = now
elseif ARGV[2] == 'd' then
  run_at = now + run_at
elseif run_at < now then
  run_at = now
end
unqueue(K, id, m)
m.run_at = run_at
metas_set(K, {id, meta_encode(m)})
place(K, id, run_at, now)
return {3, run_at}
