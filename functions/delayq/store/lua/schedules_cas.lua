--[[
schedules_cas: moves schedules' progress forward, each only if it is still what the caller read
(compare-and-set): a claim of the work the sweep found, or the settling of a claim carried out.
Of several sweepers that read the same progress, one moves it; the others learn they lost.

KEYS[1]  the partition's _schedule_state (hash)
KEYS[2]  the partition's _schedules_due (sorted set)
ARGV[1]  claim ms: a claimed outbox makes its schedule due (for the sweep to take over) this long from now
then 4 per schedule:
  topic/name
  its progress as read ('' none)
  its new progress ('' forgets it)
  when it is due next: ms, 'claim' (now + claim ms), or '' never
Returns {now_ms, then per schedule 1 moved, 0 not (its progress had changed)}
]]
-- @include time

local now = now_ms()
local claim_ms = tonumber(ARGV[1])
local out = {now}
for i = 2, #ARGV, 4 do
  local name, expected, progress, due = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if (redis.call('HGET', KEYS[1], name) or '') ~= expected then
    out[#out + 1] = 0
  else
    if progress == '' then
      redis.call('HDEL', KEYS[1], name)
    else
      redis.call('HSET', KEYS[1], name, progress)
    end
    if due == 'claim' then
      redis.call('ZADD', KEYS[2], now + claim_ms, name)
    elseif due == '' then
      redis.call('ZREM', KEYS[2], name)
    else
      redis.call('ZADD', KEYS[2], due, name)
    end
    out[#out + 1] = 1
  end
end
return out
