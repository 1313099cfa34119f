--[[
jobs_done: a page of one topic's receipts (done jobs), newest first, before a cursor.

The cursor is the position of the last receipt listed: positions never change while a receipt is
kept (includes/receipts.lua), so the page ends just before index (cursor - the head's position), and
a walk of the pages lists every receipt that stays exactly once, whatever is made (at the tail) or
forgotten (at the head, or as holes) meanwhile. Holes are skipped. O(page + holes met).

KEYS        the topic's key group (keys.py Partition.key_group)
ARGV[1]     limit: at most this many jobs
ARGV[2]     the cursor: position of the last receipt listed, '' to start at the newest
Returns {more, then 5 values per job: id, position, meta, result (as the bodies hash keeps it, nil:
         none), history (includes/history.lua, nil: none)}
  more  1 if receipts are left after this page (older ones)
]]
-- @include topic_keys
-- @include jobs

local K = topic_keys(1)
local limit = tonumber(ARGV[1])
local length = redis.call('LLEN', K.done)
local head = tonumber(redis.call('HGET', K.control, 'done_head')) or 0
local stop = length  -- the page ends before this index
if ARGV[2] ~= '' then
  stop = math.min(length, math.max(0, tonumber(ARGV[2]) - head))
end

local ids, positions, more = {}, {}, 0
while stop > 0 and more == 0 do
  local start = math.max(0, stop - (limit - #ids) - 1)
  local got = redis.call('LRANGE', K.done, start, stop - 1)
  for i = #got, 1, -1 do
    local id = got[i]
    if id ~= '' then
      if #ids == limit then
        more = 1
        break
      end
      ids[#ids + 1], positions[#positions + 1] = id, head + start + i - 1
    end
  end
  stop = start
end
local out = {more}
if #ids == 0 then
  return out
end
local metas = metas_get(K, ids)
local results = bodies_get(K, ids)
local histories = redis.call('HMGET', K.errors, unpack(ids))
for i, id in ipairs(ids) do
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = id, positions[i], metas[i], results[i], histories[i]
end
return out
