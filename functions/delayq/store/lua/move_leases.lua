--[[
move_leases: moves the leases a version before the partition's lease sets kept in each topic's own
leased set (id -> deadline) and indexed in _leases (topic -> its first deadline) into the
partition's _leased and _leased_lex (leases.lua), for the sweeper, which learns of them from the
sweep (its `old` topics). A lease already there stays as it is (its job was leased again since);
one of a job settled meanwhile is dropped by the sweep when it expires. A consumer of the older
version still running leases into the old sets, and puts its topic back in _leases: the next sweep
names it again.

KEYS[1]     the partition's _leases index, as the older version kept it
KEYS[2..3]  the partition's _leased and _leased_lex
KEYS[4..]   per topic, its old leased set (keys.py Partition.old_leased)
ARGV        the topics, in the order of their keys
Returns the number of leases moved.
]]
local CHUNK = 1000  -- members per ZADD (unpack has a limit)

local moved = 0
for i, topic in ipairs(ARGV) do
  local old = KEYS[3 + i]
  local leases = redis.call('ZRANGE', old, 0, -1, 'WITHSCORES')
  for first = 1, #leases, 2 * CHUNK do
    local by_deadline, by_topic = {}, {}
    for n = first, math.min(first + 2 * CHUNK - 1, #leases), 2 do
      local member = topic .. '/' .. leases[n]
      by_deadline[#by_deadline + 1], by_deadline[#by_deadline + 2] = leases[n + 1], member
      by_topic[#by_topic + 1], by_topic[#by_topic + 2] = 0, member
    end
    redis.call('ZADD', KEYS[2], 'NX', unpack(by_deadline))
    redis.call('ZADD', KEYS[3], 'NX', unpack(by_topic))
  end
  moved = moved + #leases / 2
  redis.call('DEL', old)
  redis.call('ZREM', KEYS[1], topic)
end
return moved
