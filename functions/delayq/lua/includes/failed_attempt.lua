-- @include meta
-- @include backoff
-- A failed attempt of a leased job (its handler failed or timed out, or its lease expired): back to
-- delayed after its backoff, or dead once its retries are spent, or at once when the failure is
-- permanent (retrying cannot help). Returns 'retried' or 'dead'.
local function failed_attempt(K, id, m, now, err, topic_retries, topic_backoff, permanent)
  redis.call('ZREM', K.leased, id)
  redis.call('HSET', K.errors, id, err)
  m.lease = ''
  local retries = topic_retries
  if m.retries ~= '' then
    retries = tonumber(m.retries)
  end
  local outcome
  local attempts = tonumber(m.attempts)
  if attempts <= retries and not permanent then
    local backoff = topic_backoff
    if m.backoff ~= '' then
      backoff = m.backoff
    end
    m.state = 'q'
    m.run_at = now + backoff_ms(backoff, attempts)
    redis.call('ZADD', K.delayed, m.run_at, id)
    outcome = 'retried'
  else
    m.state = 'x'
    redis.call('ZADD', K.dead, now, id)
    outcome = 'dead'
  end
  redis.call('HSET', K.meta, id, meta_encode(m))
  return outcome
end
