--[[
lateness_add: adds one consumer's counts of recent lateness of some topics to each one's window (see
lateness.py), in the current minute by Redis time; forgets the minutes that left the window, and the
whole hash once the topic has been quiet for a window.

The hash holds one field per minute, "<minute>" -> "bucket=deliveries,bucket=deliveries...", and
"kept" -> the first minute it may still hold. Only commands delayq's ACL already allows (no HINCRBY,
no HKEYS): the minutes to forget are named from "kept" on; at most window + 2 of them.

KEYS[1..n]     the topics' lateness hashes (keys.py), all of one partition
ARGV[1]        the window, in whole minutes before the current one
ARGV[2..n+1]   each topic's counts, in the order of KEYS: "bucket=deliveries,bucket=deliveries..."
Returns the number of minutes forgotten, all topics together.
]]
-- @include time

local window = tonumber(ARGV[1])
local minute = math.floor(now_ms() / 60000)
local first = minute - window
local forgotten = 0

local function add_counts(key, added)
  local counts, order = {}, {}
  local function add(bucket, n)
    if counts[bucket] == nil then
      counts[bucket] = 0
      order[#order + 1] = bucket
    end
    counts[bucket] = counts[bucket] + n
  end
  local stored = redis.call('HMGET', key, minute, 'kept')
  for bucket, n in string.gmatch(stored[1] or '', '(%d+)=(%d+)') do
    add(tonumber(bucket), tonumber(n))
  end
  for bucket, n in string.gmatch(added, '(%d+)=(%d+)') do
    add(tonumber(bucket), tonumber(n))
  end
  local parts = {}
  for i, bucket in ipairs(order) do
    parts[i] = bucket .. '=' .. counts[bucket]
  end
  local merged = table.concat(parts, ',')

  local kept = tonumber(stored[2])
  if kept == nil or kept < first then
    local gone = {}
    -- Older fields than first - window - 2 cannot be left: the hash expires a window after its last write.
    for at = math.max(kept or first, first - window - 2), first - 1 do
      gone[#gone + 1] = at
    end
    if #gone > 0 then
      forgotten = forgotten + redis.call('HDEL', key, unpack(gone))
    end
    redis.call('HSET', key, minute, merged, 'kept', first)
  else
    redis.call('HSET', key, minute, merged)
  end
  redis.call('PEXPIRE', key, (window + 1) * 60000)
end

for i = 1, #KEYS do
  add_counts(KEYS[i], ARGV[i + 1])
end
return forgotten
