--[[
layout: the namespace's partition count, recorded by the first client that uses the namespace, so
that a client configured with another count (whose jobs would land in, and whose loops would read,
partitions nobody else uses) is refused instead of stranding jobs.

KEYS[1]  the namespace's _layout key
ARGV[1]  this client's partition count
Returns {the recorded count, 1 if this call recorded it (the namespace is new), else 0}.
]]
local recorded = redis.call('GET', KEYS[1])
if recorded then
  return {recorded, 0}
end
redis.call('SET', KEYS[1], ARGV[1])
return {ARGV[1], 1}
