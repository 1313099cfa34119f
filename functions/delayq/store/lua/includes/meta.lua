-- A job's metadata, one string per job in its topic's meta hash (the Python side is core/job.py Meta):
--   state|attempts|run_at_ms|enqueued_at_ms|lease_token|retries|timeout_ms|backoff_ms_csv[|key]
-- state: QUEUED (in delayed, or in ready once due), RESERVED (leased to a consumer), DEAD, DONE (a
-- receipt, in the done list: its lease_token field holds 'started_at:done_at', when its last
-- attempt's handler started and when it succeeded, ms). The next three are per-job overrides, ''
-- when the topic's value applies; a job with a flow key ends with it. The overrides as the hot path
-- matches them ('retries|timeout_ms|backoff_ms_csv[|key]') keep the key: what is copied keeps it.
local QUEUED, RESERVED, DEAD, DONE = 'q', 'l', 'x', 'd'  -- core/job.py names the same (a test checks)

-- The hot path (take.lua, ack.lua, receipts.lua) reads and writes metas as text, by these patterns,
-- without decoding them.
local QUEUED_META = '^' .. QUEUED .. '|(%d+)|(%d+)|(%d+)|[^|]*|(.*)$'  -- attempts, run_at, enqueued_at, overrides
local RESERVED_META = '^' .. RESERVED .. '(|%d+|%d+|%d+|)([^|]+)(|.*)$'  -- the fields around the token, the token
local RECEIPT_DONE_AT = '^' .. DONE .. '|%d+|%d+|%d+|%d+:(%d+)|'  -- when a receipt's job succeeded
--
-- Decoded fields are the strings as stored: a script converts only what it computes with
-- (tonumber), and may assign integers back; encoding writes strings as they are and integers exactly
-- (below 1e14). Turning numbers back into text is the costly part of this codec, so what a script
-- does not change is never converted at all.
local function meta_decode(raw)
  local state, attempts, run_at, enqueued_at, lease, retries, timeout, backoff, key =
    string.match(raw, '^(%a)|(%d+)|(%d+)|(%d+)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|?(.*)$')
  return {
    state = state, attempts = attempts, run_at = run_at, enqueued_at = enqueued_at,
    lease = lease, retries = retries, timeout = timeout, backoff = backoff, key = key,
  }
end

local function meta_encode(m)
  local raw = m.state .. '|' .. m.attempts .. '|' .. m.run_at .. '|' .. m.enqueued_at .. '|' .. m.lease .. '|'
    .. m.retries .. '|' .. m.timeout .. '|' .. m.backoff
  if m.key ~= '' then
    return raw .. '|' .. m.key
  end
  return raw
end

-- The flow key in a job's overrides as QUEUED_META and RESERVED_META match them; '' for none.
local function overrides_key(overrides)
  return string.match(overrides, '^[^|]*|[^|]*|[^|]*|(.+)$') or ''
end

-- The flow key of a job by its meta, without a decode; '' for none.
local function meta_key(raw)
  return string.match(raw, '^%a|%d+|%d+|%d+|[^|]*|[^|]*|[^|]*|[^|]*|(.+)$') or ''
end

-- The lease token of a meta if the job is leased, else nil: what ack and fail check, without a decode.
-- A token is a number of the partition's counter, or the id of the consumer's take (take.lua).
local function meta_lease(raw)
  local _, token = string.match(raw, RESERVED_META)
  return token
end
