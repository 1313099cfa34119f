--[[
activity_add: adds one process's counts of some topics (activity.py) to each one's activity, in the
current minute by Redis time; forgets the minutes older than it keeps, and the whole hash once
the topic has been quiet that long.

The hash holds one field per minute, "<minute>" -> "name=count,name=count..." (activity.Counts), and
"kept" -> the first minute it may still hold. Only commands delayq's ACL already allows (no HINCRBY,
no HKEYS): the minutes to forget are named from "kept" on; at most keep + 2 of them, once a minute.

KEYS[1..n]     the topics' activity hashes (keys.py), all of one partition
ARGV[1]        how many whole minutes before the current one are kept
ARGV[2..n+1]   each topic's counts, in the order of KEYS: "name=count,name=count..."
Returns the number of minutes forgotten, all topics together.
]]
-- @include time

local keep = tonumber(ARGV[1])
local minute = math.floor(now_ms() / 60000)
local first = minute - keep
local forgotten = 0

local function add_counts(key, added)
  local counts, order = {}, {}
  local function add(name, n)
    if counts[name] == nil then
      counts[name] = 0
      order[#order + 1] = name
    end
    counts[name] = counts[name] + n
  end
  local stored = redis.call('HMGET', key, minute, 'kept')
  for name, n in string.gmatch(stored[1] or '', '(%w+)=(%d+)') do
    add(name, tonumber(n))
  end
  for name, n in string.gmatch(added, '(%w+)=(%d+)') do
    add(name, tonumber(n))
  end
  local parts = {}
  for i, name in ipairs(order) do
    parts[i] = name .. '=' .. counts[name]
  end
  local merged = table.concat(parts, ',')

  local kept = tonumber(stored[2])
  if kept == nil or kept < first then
    local gone = {}
    -- Older fields than first - keep - 2 cannot be left: the hash expires keep minutes after its last write.
    for at = math.max(kept or first, first - keep - 2), first - 1 do
      gone[#gone + 1] = at
    end
    if #gone > 0 then
      forgotten = forgotten + redis.call('HDEL', key, unpack(gone))
    end
    redis.call('HSET', key, minute, merged, 'kept', first)
  else
    redis.call('HSET', key, minute, merged)
  end
  redis.call('PEXPIRE', key, (keep + 1) * 60000)
end

for i = 1, #KEYS do
  add_counts(KEYS[i], ARGV[i + 1])
end
return forgotten
