--[[
move_jobs: moves the jobs a version before the partition's job hashes kept in each topic's own
`meta` and `bodies` hashes (field: the id) into the partition's _metas and _bodies (jobs.lua: field
topic/id), under the partition's lock: a step of the sweeper's walk over _topics, bounded work per
call. A job found in both keeps what the partition's hash holds (written there since: jobs.lua drops
the topic's copy of a job it writes, and reads it where it is not moved yet). A topic's metas move
first, then the bodies left (of jobs whose meta was written since, in the partition's hash).

KEYS[1]     the partition's _lock
KEYS[2..]   a key group per topic (keys.py Partition.key_group, as given while jobs may be left)
ARGV[1]     lock token
ARGV[2]     at most this many jobs moved in all, about
then per topic: where its walk is: 'm' or 'b' (metas, then bodies) and an HSCAN cursor ('m0' to start)
Returns -5 if the lock does not hold the token (nothing done), else per topic where its walk is
next: '' once its own hashes are gone.
]]
-- @include topic_keys
-- @include jobs

local STEP = 100  -- fields per HSCAN, about

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -5
end
local budget = tonumber(ARGV[2])

-- Moves the fields of `step` (HSCAN's: field, value ...) of topic K's own hash `old` into `hash`
-- where it has none, and deletes them there. Returns how many it read.
local function move(K, old, hash, step)
  local ids, fields, values = {}, {}, {}
  for i = 1, #step, 2 do
    local n = #ids + 1
    ids[n], fields[n], values[n] = step[i], field_of(K, step[i]), step[i + 1]
  end
  if #ids == 0 then
    return 0
  end
  local sets = {}
  for i, here in ipairs(redis.call('HMGET', hash, unpack(fields))) do
    if not here then
      sets[#sets + 1], sets[#sets + 2] = fields[i], values[i]
    end
  end
  if #sets > 0 then
    redis.call('HSET', hash, unpack(sets))
  end
  redis.call('HDEL', old, unpack(ids))
  return #ids
end

local out = {}
for g = 1, (#KEYS - 1) / KEY_GROUP_SIZE do
  local K = topic_keys(2 + (g - 1) * KEY_GROUP_SIZE)
  local phase, cursor = string.sub(ARGV[2 + g], 1, 1), string.sub(ARGV[2 + g], 2)
  while K.old_meta and phase ~= '' and budget > 0 do
    local old, hash = K.old_meta, K.metas
    if phase == 'b' then
      old, hash = K.old_bodies, K.bodies
    end
    local step = redis.call('HSCAN', old, cursor, 'COUNT', STEP)
    cursor = step[1]
    if phase == 'm' then
      -- A job's body moves with its meta: the bodies left after are those of jobs written since.
      local ids = {}
      for i = 1, #step[2], 2 do
        ids[#ids + 1] = step[2][i]
      end
      if #ids > 0 then
        local found = {}
        for i, body in ipairs(redis.call('HMGET', K.old_bodies, unpack(ids))) do
          if body then
            found[#found + 1], found[#found + 2] = ids[i], body
          end
        end
        move(K, K.old_bodies, K.bodies, found)
      end
    end
    budget = budget - move(K, old, hash, step[2])
    if cursor == '0' then  -- a walk of the whole hash: what was there at its start is moved
      if redis.call('EXISTS', old) == 1 then
        cursor = '0'  -- written meanwhile by an older version still running: walked again
      elseif phase == 'm' then
        phase = 'b'
      else
        phase = ''
      end
    end
  end
  if not K.old_meta then
    phase = ''
  end
  out[g] = phase == '' and '' or phase .. cursor
end
return out
