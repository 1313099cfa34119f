-- The minutes' activity hashes a read is given (activity_read.lua, lateness_read.lua): consecutive
-- minutes from `first_key`'s (KEYS[1]), named by the caller around Redis' time as it knows it
-- (calls.py _window).

-- Where in KEYS the `wanted` minutes ending with the current one (by Redis' time `now`) are: their
-- first and last index, or nil if KEYS do not cover them (the caller's estimate was off).
local function wanted_minutes(now, first_key, wanted)
  local last = math.floor(now / 60000) - first_key + 1
  local first = last - wanted + 1
  if first < 1 or last > #KEYS then
    return nil
  end
  return first, last
end
