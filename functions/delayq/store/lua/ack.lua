--[[
ack: jobs of one topic whose handler succeeded are done: kept as receipts for the topic's keep_done,
or gone at once when it is 0 (includes/ack.lua). A consumer's acks usually ride with its next take of
the topic instead (take.lua); this call is for those that cannot wait for one.

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
ARGV[1]     keep_done in ms: how long a receipt is kept; 0 keeps none
ARGV[2]     keep_done_max: at most this many receipts are kept
then 4 values per job: id, lease token, started_at_ms (when the attempt's handler started, Redis
            time), result (what it answered, kept with its receipt; '': none)
Returns the number of jobs acknowledged.
]]
-- @include time
-- @include topic_keys
-- @include ack

local K = topic_keys(1)
return ack_jobs(K, now_ms(), tonumber(ARGV[1]), tonumber(ARGV[2]), 3, #ARGV, true)
