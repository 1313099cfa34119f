--[[
stats: how many jobs of one topic are in each state in this partition, when the next falls due,
whether the topic is paused here, and since when the oldest due job has waited.

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
Returns {delayed, ready, reserved, dead, next_run_at_ms, paused, now_ms, oldest_due_ms, done}
  next_run_at_ms  the earliest run-at of a delayed job, -1 if none
  paused          1 if the topic is paused (pause.lua), else 0
  now_ms          Redis' time
  oldest_due_ms   the run-at of the job that has waited longest since it fell due: the head of the
                  ready list, or a delayed job already due that the sweeper has not moved yet; -1
                  if none is due
  done            receipts kept of jobs that succeeded
]]
-- @include time
-- @include topic_keys
-- @include queue
-- @include leases
-- @include jobs

local HEAD_SCAN = 100  -- ready ids read to find the first that is not a hole

local K = topic_keys(1)
local now = now_ms()
local control = redis.call('HMGET', K.control, 'paused', 'holes', 'done_holes')
local next_at = first_score(K.delayed)

local oldest = -1
if next_at and next_at <= now then
  oldest = next_at
end
local heads = {}  -- the first of the ready list, and of the fair set (jobs with flow keys)
for _, id in ipairs(redis.call('LRANGE', K.ready, 0, HEAD_SCAN - 1)) do
  if id ~= HOLE then
    heads[1] = id
    break
  end
end
heads[#heads + 1] = redis.call('ZRANGE', K.fair, 0, 0)[1]
for _, id in ipairs(heads) do
  local raw = meta_get(K, id)
  local run_at = raw and tonumber(string.match(raw, '^%a|%d+|(%d+)|'))
  if run_at and (oldest < 0 or run_at < oldest) then
    oldest = run_at
  end
end

local paused = 0
if control[1] then
  paused = 1
end
return {
  redis.call('ZCARD', K.delayed), ready_count(K, tonumber(control[2]) or 0),
  lease_count(K), redis.call('ZCARD', K.dead), next_at or -1, paused, now, oldest,
  redis.call('LLEN', K.done) - (tonumber(control[3]) or 0),
}
