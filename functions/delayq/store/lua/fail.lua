--[[
fail: failed attempts of leased jobs of one topic (the handler raised, answered an error or timed
out). Each job goes back to the delayed set after its backoff, or to dead once its retries are spent
or at once when its failure is permanent. Only jobs still leased with the given token are touched
(see ack.lua).

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
KEYS[23..24] the partition's outbox (keys.py Partition.outbox_keys: its _seq counter, its _outbox)
ARGV[1]     the topic's retries
ARGV[2]     the topic's backoff, comma-separated ms
ARGV[3]     on_dead: the callback topic of the topic's jobs that go dead ('' none; callbacks.lua)
then 7 values per job: id, lease token, error, 'r' (retry if retries are left) or 'p' (permanent),
            the least wait before the retry in ms (a Retry-After; 0: the backoff alone), when the
            attempt started (Redis ms; '' not known) and its outcome ('error' or 'timeout'), for the
            job's history (includes/history.lua)
Returns {retried, dead, then the ids of the dead}
]]
-- @include time
-- @include topic_keys
-- @include failed_attempt
-- @include callbacks
-- @include jobs

local K = topic_keys(1)
local O = outbox_of(KEYS[KEY_GROUP_SIZE + 1], KEYS[KEY_GROUP_SIZE + 2])
local on_dead = ARGV[3]
local now = nil
local retried, dead = 0, {}
for i = 4, #ARGV, 7 do
  local raw = meta_get(K, ARGV[i])
  if raw and meta_lease(raw) == ARGV[i + 1] then
    now = now or now_ms()
    local permanent = ARGV[i + 3] == 'p'
    local wait = tonumber(ARGV[i + 4])
    local m = meta_decode(raw)
    local verdict = failed_attempt(
      K, ARGV[i], m, now, ARGV[i + 2], tonumber(ARGV[1]), ARGV[2], permanent, wait, ARGV[i + 5], ARGV[i + 6]
    )
    if verdict == 'retried' then
      retried = retried + 1
    else
      dead[#dead + 1] = ARGV[i]
      if on_dead ~= '' then
        local body = body_get(K, ARGV[i])
        callback_add(O, on_dead, K, ARGV[i], m.key, m.attempts, 'dead', ARGV[i + 5], now, body, ARGV[i + 2])
      end
    end
  end
end
outbox_flush(O)
return {retried, #dead, unpack(dead)}
