--[[
replay: dead jobs of one topic are due again now, with their attempts reset; their last error is
kept until they succeed.

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
ARGV[1]     'ids', followed by the ids to replay (ids that are not dead are skipped), or
            'oldest', followed by a limit: replay up to that many, oldest deaths first
Returns the number of jobs replayed; with 'oldest', call again until it returns 0.
]]
-- @include time
-- @include topic_keys
-- @include meta
-- @include queue
-- @include jobs

local K = topic_keys(1)
local ids
if ARGV[1] == 'oldest' then
  local limit = tonumber(ARGV[2])
  if limit < 1 then
    return 0
  end
  ids = redis.call('ZRANGE', K.dead, 0, limit - 1)
else
  ids = {}
  for i = 2, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
end

local now = now_ms()
local replayed = {}
for _, id in ipairs(ids) do
  if redis.call('ZREM', K.dead, id) == 1 then
    local m = meta_decode(meta_get(K, id))
    m.state, m.attempts, m.run_at = QUEUED, 0, now
    metas_set(K, {id, meta_encode(m)})
    replayed[#replayed + 1] = id
  end
end
if #replayed > 0 then
  push_ready(K, replayed, now)
end
return #replayed
