-- A topic's rate limit in one partition: a token bucket kept as one number, the time at which the
-- bucket is next empty (GCRA's theoretical arrival time: control 'rate_at', µs of Redis time). Each
-- start moves it one interval on (1e6 * partitions / rate µs: this partition's share of the rate);
-- starts are allowed while it stays within `tolerance` of now (the burst's share, in µs: a full
-- bucket). Redis' TIME alone refills it: a quiet spell lets it fall back to now, the bucket full.

-- The bucket at `now` (Redis' time in µs), as `interval` and `tolerance` (µs, settings.py
-- TopicConfig.rate_share) give it and control's 'rate_at' (as read by the caller) left it, with
-- `allowed`: how many starts it holds.
local function rate_bucket(control, interval, tolerance, now, rate_at)
  local at = tonumber(rate_at) or now
  if at < now then
    at = now
  end
  local allowed = math.floor((now + tolerance - at) / interval)
  if allowed < 0 then
    allowed = 0
  end
  return {control = control, now = now, at = at, interval = interval, tolerance = tolerance, allowed = allowed}
end

-- Spends `n` starts of the bucket.
local function rate_spend(bucket, n)
  if n > 0 then
    bucket.at = bucket.at + n * bucket.interval
    redis.call('HSET', bucket.control, 'rate_at', string.format('%d', bucket.at))
  end
end

-- The ms until the bucket holds a start again (at least 1).
local function rate_wait_ms(bucket)
  return math.max(1, math.ceil((bucket.at + bucket.interval - bucket.tolerance - bucket.now) / 1000))
end
