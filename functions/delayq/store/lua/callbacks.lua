--[[
callbacks: the jobs of callback topics, made from outbox records (includes/callbacks.lua) of one
source partition, in this partition: each due now, with the flow key of the job it reports on.

A record is made into a job once, however often the sweeper sends it (a sweeper that died between
this call and the outbox's trim sends it again): this partition keeps, per source partition, the
highest record number it made a job of, and skips the records at or below it. Records come in their
order, so that number only grows.

KEYS[1]     this partition's _inbox hash: source partition's tag -> the last record number made here
KEYS[2 ...] a key group per callback topic (keys.py Partition.key_group)
ARGV[1]     the source partition's tag
then 5 values per job: its group (1-based), the record's number, the job's id, its flow key ('' for
            none), its body (JSON)
Returns how many jobs were made (records skipped as made before are not counted).
]]
-- @include time
-- @include topic_keys
-- @include create
-- @include jobs

local now = now_ms()
local now_text = tostring(now)
local source = ARGV[1]
local last = tonumber(redis.call('HGET', KEYS[1], source) or '0')
local made, highest = 0, last
local G = {}  -- per group: its keys, and the ids made (and their flow keys), placed at the end
for i = 2, #ARGV, 5 do
  local seq = tonumber(ARGV[i + 1])
  if seq > last then
    local group, id, key = tonumber(ARGV[i]), ARGV[i + 2], ARGV[i + 3]
    local w = G[group] or {K = topic_keys(2 + (group - 1) * KEY_GROUP_SIZE), ids = {}, keys = {}, keyed = false}
    G[group] = w
    local overrides = key ~= '' and ('|||' .. key) or '||'
    if meta_create(w.K, id, new_meta(now_text, now_text, overrides)) then
      bodies_set(w.K, {id, ARGV[i + 4]})
      local n = #w.ids + 1
      w.ids[n], w.keys[n] = id, key
      w.keyed = w.keyed or key ~= ''
      made = made + 1
    end
    highest = math.max(highest, seq)
  end
end
for g = 1, (#KEYS - 1) / KEY_GROUP_SIZE do
  local w = G[g]
  if w and #w.ids > 0 then
    place(w.K, {}, nil, w.ids, now, w.keyed and w.keys, w.keyed)
  end
end
if highest > last then
  redis.call('HSET', KEYS[1], source, highest)
end
return made
