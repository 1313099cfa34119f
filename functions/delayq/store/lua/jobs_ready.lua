--[[
jobs_ready: a page of one topic's ready jobs, in the order they will be taken, after a cursor.

The cursor is the position of the last job listed: positions never change while a job stays ready
(includes/queue.lua), so the page starts at index (cursor + 1 - the head's position), and a walk of
the pages lists every job that stays ready exactly once, whatever is taken, pushed back at the head,
added at the tail or cancelled meanwhile. Holes are skipped. O(page + holes met); LRANGE reaches the
index from the nearer end of the list, node by node.

KEYS[1..9]  the topic's keys (keys.py TOPIC_KEYS)
ARGV[1]     limit: at most this many jobs
ARGV[2]     the cursor: position of the last job listed, '' to start at the head
Returns {more, then 5 values per job: id, position, meta, body, last_error (nil where none)}
  more  1 if jobs are left after this page
]]
-- @include topic_keys
-- @include queue

local K = topic_keys(1)
local limit = tonumber(ARGV[1])
local length = redis.call('LLEN', K.ready)
local head = (tonumber(redis.call('HGET', K.control, 'tail')) or 0) - length
local index = 0
if ARGV[2] ~= '' then
  index = math.max(0, tonumber(ARGV[2]) + 1 - head)
end

local ids, positions, more = {}, {}, 0
while index < length and more == 0 do
  local got = redis.call('LRANGE', K.ready, index, index + limit - #ids)
  for i, id in ipairs(got) do
    if id ~= HOLE then
      if #ids == limit then
        more = 1
        break
      end
      ids[#ids + 1], positions[#positions + 1] = id, head + index + i - 1
    end
  end
  index = index + #got
end
local out = {more}
if #ids == 0 then
  return out
end
local metas = redis.call('HMGET', K.meta, unpack(ids))
local bodies = redis.call('HMGET', K.bodies, unpack(ids))
local errors = redis.call('HMGET', K.errors, unpack(ids))
for i, id in ipairs(ids) do
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = id, positions[i], metas[i], bodies[i], errors[i]
end
return out
