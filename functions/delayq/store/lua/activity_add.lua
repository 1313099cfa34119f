--[[
activity_add: adds one process's counts to the topics' activity (activity.py), each in the minute it
was counted in. A minute's hash (a field per topic) expires whole once it is older than what is kept,
so nothing is forgotten field by field.

KEYS[1..n]  the minutes' activity hashes (keys.py Partition.activity), all of one partition
ARGV[1]     how many whole minutes before the current one are kept
then per key, in the order of KEYS: its minute, how many topics follow, then per topic its name and
            its counts, "name=count,name=count..."
Returns the number of topics' minutes written.
]]

local keep = tonumber(ARGV[1])
local written = 0

-- `stored` and `added` ("name=count,...") summed, the names in the order they first come.
local function merged(stored, added)
  local counts, order = {}, {}
  for _, text in ipairs({stored or '', added}) do
    for name, n in string.gmatch(text, '(%w+)=(%d+)') do
      if counts[name] == nil then
        counts[name] = 0
        order[#order + 1] = name
      end
      counts[name] = counts[name] + tonumber(n)
    end
  end
  local parts = {}
  for i, name in ipairs(order) do
    parts[i] = name .. '=' .. counts[name]
  end
  return table.concat(parts, ',')
end

local a = 2
for _, key in ipairs(KEYS) do
  local minute, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local topics = {}
  for i = 1, n do
    topics[i] = ARGV[a + 2 * i]
  end
  local stored = redis.call('HMGET', key, unpack(topics))
  local fields = {}
  for i = 1, n do
    fields[#fields + 1] = topics[i]
    fields[#fields + 1] = merged(stored[i], ARGV[a + 2 * i + 1])
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIREAT', key, (minute + 1 + keep) * 60000)
  written = written + n
  a = a + 2 + 2 * n
end
return written
