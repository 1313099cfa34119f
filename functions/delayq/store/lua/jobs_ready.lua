--[[
jobs_ready: a page of one topic's ready jobs, in the order they will be taken, after a cursor: the
ready list's (keyless jobs), then the fair set's (jobs with flow keys, by turn), then the parked
(includes/flow.lua: jobs whose key is at its limit, by key and run-at).

In the list, the cursor is the position of the last job listed: positions never change while a job
stays ready (includes/queue.lua), so the page starts at index (cursor + 1 - the head's position), and
a walk of the pages lists every job that stays ready exactly once, whatever is taken, pushed back at
the head, added at the tail or cancelled meanwhile. Holes are skipped. O(page + holes met); LRANGE
reaches the index from the nearer end of the list, node by node. In the fair set, the cursor is the
(turn, id) of the last job listed; jobs are taken in that order, so the page starts at that job's rank
when it is still there, else after the jobs with a lower turn. Among the parked, the cursor is the
member of the last job listed.

KEYS        the topic's key group (keys.py Partition.key_group)
ARGV[1]     limit: at most this many jobs
ARGV[2]     the list cursor: position of the last job listed, '' to start at the head
ARGV[3..4]  the fair set's cursor: turn and id of the last job listed there, '' '' while in the list
ARGV[5]     the parked cursor: the member of the last job listed there, '' before
Returns {more, then 5 values per job: id, place, meta, body, last_error (nil where none)}
  more   1 if jobs are left after this page
  place  a list job's position; a fair set job's turn as 'f<turn>'; a parked job's member as 'p<member>'
]]
-- @include topic_keys
-- @include queue
-- @include jobs

local K = topic_keys(1)
local limit = tonumber(ARGV[1])
local length = redis.call('LLEN', K.ready)
local head = (tonumber(redis.call('HGET', K.control, 'tail')) or 0) - length
local index = 0
if ARGV[2] ~= '' then
  index = math.max(0, tonumber(ARGV[2]) + 1 - head)
end

local ids, positions, more = {}, {}, 0
local in_parked = ARGV[5] ~= ''
local in_fair = ARGV[3] ~= '' or in_parked
while not in_fair and index < length and more == 0 do
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
if more == 0 and not in_parked then
  local start, after_turn, after_id = 0, tonumber(ARGV[3]), ARGV[4]
  if in_fair then
    local rank = redis.call('ZRANK', K.fair, after_id)
    if rank and tonumber(redis.call('ZSCORE', K.fair, after_id)) == after_turn then
      start, after_turn = rank + 1, nil  -- the cursor's job is still there: the page starts after it
    else
      start = redis.call('ZCOUNT', K.fair, '-inf', '(' .. after_turn)
    end
  end
  while more == 0 do
    local want = limit - #ids + 1  -- one more than the page holds: whether more are left
    local got = redis.call('ZRANGE', K.fair, start, start + want - 1, 'WITHSCORES')
    for i = 1, #got, 2 do
      local turn = tonumber(got[i + 1])
      -- Gone from the set: skip what it had listed, the jobs of its turn up to its id.
      if not (after_turn and turn == after_turn and got[i] <= after_id) then
        if #ids == limit then
          more = 1
          break
        end
        ids[#ids + 1], positions[#positions + 1] = got[i], 'f' .. got[i + 1]
      end
    end
    if #got < 2 * want then
      break
    end
    start = start + want
  end
end
if more == 0 then
  local from = '-'
  if in_parked then
    from = '(' .. ARGV[5]
  end
  for _, member in ipairs(redis.call('ZRANGE', K.parked, from, '+', 'BYLEX', 'LIMIT', 0, limit - #ids + 1)) do
    if #ids == limit then
      more = 1
      break
    end
    ids[#ids + 1], positions[#positions + 1] = string.match(member, '^[^|]*|%d+|(.*)$'), 'p' .. member
  end
end
local out = {more}
if #ids == 0 then
  return out
end
local metas = metas_get(K, ids)
local bodies = bodies_get(K, ids)
local errors = redis.call('HMGET', K.errors, unpack(ids))
for i, id in ipairs(ids) do
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = id, positions[i], metas[i], bodies[i], errors[i]
end
return out
