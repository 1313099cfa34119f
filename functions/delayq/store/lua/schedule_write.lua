--[[
schedule_write: create, replace or delete a schedule, in one atomic step: its definition, and its
progress with the job writes the change implies (its outbox, claimed by the caller). A schedule
never has two definitions, nor none while it exists. (scheduler.py describes the progress.)

KEYS[1]  the partition's _schedules (sorted set of topic/name, by name)
KEYS[2]  the partition's _schedule_defs (hash)
KEYS[3]  the partition's _schedule_state (hash)
KEYS[4]  the partition's _schedules_due (sorted set)
KEYS[5]  the partition's _seq (counter): each write's progress gets a new generation from it
ARGV[1]  the schedule, topic/name
ARGV[2]  its progress as the caller read it ('' none): the write is done only if it still is
ARGV[3]  the definition to store (JSON); '' deletes the schedule
ARGV[4]  the new progress without its generation, 'last|claim|outbox'; '' forgets the progress
ARGV[5]  claim ms: a claimed outbox makes the schedule due (for the sweep to take over) this long from now
ARGV[6]  when the schedule is due if nothing is claimed (ms); '' never
Returns {code, now_ms, generation}
  code  1 created, 2 replaced, 3 deleted;
        -2 no such schedule (delete), -6 the progress is no longer the one read (read again),
        -7 busy: another caller's claim holds the outbox; now_ms is then the ms until it expires
]]
-- @include time

local name, expected = ARGV[1], ARGV[2]
local current = redis.call('HGET', KEYS[3], name) or ''
if current ~= expected then
  return {-6, 0, 0}
end
local now = now_ms()
if string.match(current, '^%d+|%d*|([^|]+)|') then
  local deadline = tonumber(redis.call('ZSCORE', KEYS[4], name) or 0)
  if deadline > now then
    return {-7, deadline - now, 0}
  end
end
local existed = redis.call('HGET', KEYS[2], name) ~= false
local code = 3
if ARGV[3] == '' then
  if not existed then
    return {-2, now, 0}
  end
  redis.call('HDEL', KEYS[2], name)
  redis.call('ZREM', KEYS[1], name)
else
  redis.call('HSET', KEYS[2], name, ARGV[3])
  redis.call('ZADD', KEYS[1], 0, name)
  code = existed and 2 or 1
end

if ARGV[4] == '' then
  redis.call('HDEL', KEYS[3], name)
  redis.call('ZREM', KEYS[4], name)
  return {code, now, 0}
end
local generation = redis.call('INCRBY', KEYS[5], 1)
redis.call('HSET', KEYS[3], name, generation .. '|' .. ARGV[4])
if string.match(ARGV[4], '^%d*|[^|]+|') then
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[5]), name)
elseif ARGV[6] ~= '' then
  redis.call('ZADD', KEYS[4], ARGV[6], name)
else
  redis.call('ZREM', KEYS[4], name)
end
return {code, now, generation}
