--[[
ack: jobs of one topic whose handler succeeded are done and gone.

A job is acknowledged only while it is still leased with the given token: the late answer of an
attempt whose lease expired (and that may be leased again by now), or of a cancelled job, changes
nothing.

KEYS[1..12] the topic's key group (keys.py Partition.key_group)
ARGV        pairs: id, lease token
Returns the number of jobs acknowledged.
]]
-- @include topic_keys
-- @include meta
-- @include topic_index

local K = topic_keys(1)
local ids = {}
for i = 1, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
local done = {}
if #ids > 0 then
  local metas = redis.call('HMGET', K.meta, unpack(ids))
  for i, id in ipairs(ids) do
    if metas[i] and meta_lease(metas[i]) == ARGV[2 * i] then
      done[#done + 1] = id
    end
  end
end
if #done > 0 then
  redis.call('ZREM', K.leased, unpack(done))
  redis.call('HDEL', K.meta, unpack(done))
  redis.call('HDEL', K.bodies, unpack(done))
  redis.call('HDEL', K.errors, unpack(done))
  index_leased_exact(K)
end
return #done
