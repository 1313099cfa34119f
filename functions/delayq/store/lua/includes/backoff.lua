-- The wait after the n-th failure: the n-th entry of a comma-separated list of ms, the last repeated.
-- The only copy of this rule: tests/redis/test_redis_backoff.py checks it through a table.
local function backoff_ms(csv, failures)
  local chosen, i = 0, 0
  for ms in string.gmatch(csv, '[^,]+') do
    i = i + 1
    chosen = tonumber(ms)
    if i >= failures then break end
  end
  return chosen
end
