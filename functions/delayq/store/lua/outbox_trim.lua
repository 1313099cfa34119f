--[[
outbox_trim: drops the outbox records a sweeper made jobs of (callbacks.lua): those numbered up to a
given number, from the head. By number, not by count: a second sweeper that drained the same records
(one that lost the lock while it worked) trims nothing more than they.

KEYS[1]     the partition's _outbox (includes/callbacks.lua)
ARGV[1]     the highest record number made into jobs
Returns how many records were dropped.
]]

local last = tonumber(ARGV[1])
local CHUNK = 100
local dropped = 0
while true do
  local head = redis.call('LRANGE', KEYS[1], 0, CHUNK - 1)
  local n = 0
  for _, record in ipairs(head) do
    if tonumber(string.match(record, '^%["(%d+)"')) > last then
      break
    end
    n = n + 1
  end
  if n > 0 then
    redis.call('LTRIM', KEYS[1], n, -1)
    dropped = dropped + n
  end
  if n < CHUNK then
    return dropped
  end
end
