-- @include meta
-- @include backoff
-- @include topic_index
-- @include leases
-- @include flow
-- @include history
-- @include jobs
-- A failed attempt of a leased job (its handler failed or timed out, or its lease expired): back to
-- delayed after its backoff, or dead once its retries are spent, or at once when the failure is
-- permanent (retrying cannot help). A retry waits its backoff, or `at_least` ms when that is longer
-- (a Retry-After; nil or 0 for none), and a job with a flow key holds its whole key that long
-- (flow.lua). The attempt joins the job's history (history.lua) as `outcome` ('error', 'timeout',
-- 'lease_expired'), started at `started_at` ('' when not known). Returns 'retried' or 'dead'.
local function failed_attempt(K, id, m, now, err, topic_retries, topic_backoff, permanent, at_least, started_at, outcome)
  lease_remove(K, {id})
  flow_release(K, {m.key})
  if (at_least or 0) > 0 and m.key ~= '' then
    flow_hold(K, m.key, now + at_least)
  end
  history_add(K, id, m.attempts, started_at, now, outcome, err)
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
    m.state = QUEUED
    m.run_at = now + math.max(backoff_ms(backoff, attempts), at_least or 0)
    redis.call('ZADD', K.delayed, m.run_at, id)
    index_delayed(K, m.run_at)
    outcome = 'retried'
  else
    m.state = DEAD
    redis.call('ZADD', K.dead, now, id)
    outcome = 'dead'
  end
  metas_set(K, {id, meta_encode(m)})
  return outcome
end
