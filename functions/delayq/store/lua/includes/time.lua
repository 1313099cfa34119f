-- Redis server time, the only clock that decides due-ness, leases and rates: in milliseconds and in
-- microseconds, from one TIME.
local function now_ms_us()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- Redis server time in milliseconds.
local function now_ms()
  return (now_ms_us())
end
