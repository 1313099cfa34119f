--[[
enqueue_one: create one job, refused if it exists; the common call, so it has its own short script
(enqueue.lua does batches and replaces). At a steady low rate each call finds Redis' CPU cold, and
what the script does then is most of a job's cost: no line to parse, no table of gathered writes.

KEYS            the job's topic's key group (keys.py Partition.key_group: its keys, and the partition's
                topic index, which learns when the topic next has work)
ARGV[1]         at: 'd<ms>' a delay in ms from now; 'a<ms>' epoch ms (the past means now)
ARGV[2]         overrides: 'retries|timeout_ms|backoff_csv[|key]' as the meta stores them ('||' for none;
                a job with a flow key ends with it)
ARGV[3]         the job's id
ARGV[4]         its body, JSON
Returns code, run_at_ms as enqueue.lua does for one job: 1 created, or -1 and 0 when the job exists
(in any state, or as a kept receipt: a dedupe window). Its meta is checked and written by one HSETNX.
]]
-- @include time
-- @include topic_keys
-- @include create
-- @include jobs

local now = now_ms()
local now_text = tostring(now)
local K = topic_keys(1)
local id = ARGV[3]
local run_at, run_at_text = run_at_of(ARGV[1], now, now_text)
if not meta_create(K, id, new_meta(run_at_text, now_text, ARGV[2])) then
  return {-1, 0}
end
bodies_set(K, {id, ARGV[4]})
local key = ARGV[2] ~= '||' and overrides_key(ARGV[2]) or ''
if run_at <= now then
  place(K, {}, nil, {id}, now, key ~= '' and {key}, key ~= '')
else
  place(K, {run_at_text, id}, run_at, {}, now, false, key ~= '')
end
return {1, run_at}
