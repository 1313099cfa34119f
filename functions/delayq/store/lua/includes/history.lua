-- A job's history: its failed attempts, kept in its topic's errors hash under the job's id (the
-- Python side is core/job.py Attempt): the last HISTORY_KEEP of them, oldest first, each
-- 'attempt|started_at_ms|ended_at_ms|outcome|error' ('' where a time is not known), separated by RS.
-- The last entry's error is the job's last error. A success writes nothing here: its receipt's meta
-- holds its attempt and times, so a job that succeeds at once costs no history at all. The history
-- stays with a dead job and a receipt, and goes with the job (cancel, purge, a forgotten receipt).

local HISTORY_KEEP = 10
local RS = '\30'  -- the ASCII record separator: between entries, never inside one

-- Adds an attempt that failed (outcome 'error', 'timeout' or 'lease_expired') to the job's history.
local function history_add(K, id, attempt, started_at, ended_at, outcome, err)
  local entry = attempt .. '|' .. started_at .. '|' .. ended_at .. '|' .. outcome .. '|' .. string.gsub(err, RS, ' ')
  local old = redis.call('HGET', K.errors, id)
  if old then
    local entries = {}
    for kept in string.gmatch(old, '[^' .. RS .. ']+') do
      entries[#entries + 1] = kept
    end
    entries[#entries + 1] = entry
    entry = table.concat(entries, RS, math.max(1, #entries - HISTORY_KEEP + 1))
  end
  redis.call('HSET', K.errors, id, entry)
end
