--[[
ack: jobs of one topic whose handler succeeded are done: kept as receipts for the topic's keep_done,
or gone at once when it is 0 (includes/ack.lua). A consumer's acks usually ride with its next take of
the topic instead (take.lua); this call is for those that cannot wait for one.

KEYS[1..22] the topic's key group (keys.py Partition.key_group)
KEYS[23..24] the partition's outbox (keys.py Partition.outbox_keys: its _seq counter, its _outbox)
ARGV[1]     keep_done in ms: how long a receipt is kept; 0 keeps none
ARGV[2]     keep_done_max: at most this many receipts are kept
ARGV[3]     on_done: the callback topic of the topic's jobs that succeed ('' none; callbacks.lua)
then 4 values per job: id, lease token, started_at_ms (when the attempt's handler started, Redis
            time), result (what it answered, kept with its receipt; '': none)
Returns the number of jobs acknowledged.
]]
-- @include time
-- @include topic_keys
-- @include ack

local K = topic_keys(1)
local O = outbox_of(KEYS[KEY_GROUP_SIZE + 1], KEYS[KEY_GROUP_SIZE + 2])
local acked = ack_jobs(K, now_ms(), tonumber(ARGV[1]), tonumber(ARGV[2]), 4, #ARGV, true, O, ARGV[3])
outbox_flush(O)
return acked
