-- The wait after the n-th failure: the n-th entry of a comma-separated list of ms, the last repeated.
-- Mirrors schedule.py backoff_ms.
local function backoff_ms(csv, failures)
  local chosen, i = 0, 0
  for ms in string.gmatch(csv, '[^,]+') do
    i = i + 1
    chosen = tonumber(ms)
    if i >= failures then break end
  end
  return chosen
end
