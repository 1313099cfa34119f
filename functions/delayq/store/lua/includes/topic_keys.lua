-- The keys of one topic, starting at KEYS[first]: the topic's own, in the order of keys.py TOPIC_KEYS,
-- then the partition's keys that index its topics, in the order of keys.py TOPIC_INDEX_KEYS
-- (keys.py Partition.key_group). Scripts that take several topics find group g at
-- KEYS[first + (g - 1) * KEY_GROUP_SIZE]. K.name is the topic's name, read off its keys: keys.py
-- names a topic key prefix .. topic .. ':' .. kind, and the partition's _topics prefix .. '_topics'.
local TOPIC_KEY_COUNT = 16
local KEY_GROUP_SIZE = TOPIC_KEY_COUNT + 8
local function topic_keys(first)
  local K = {
    delayed = KEYS[first], ready = KEYS[first + 1], dead = KEYS[first + 2], old_meta = KEYS[first + 3],
    old_bodies = KEYS[first + 4], errors = KEYS[first + 5], control = KEYS[first + 6], done = KEYS[first + 7],
    fair = KEYS[first + 8], turns = KEYS[first + 9], flows = KEYS[first + 10], busy = KEYS[first + 11],
    pace = KEYS[first + 12], held = KEYS[first + 13], parked = KEYS[first + 14], wake = KEYS[first + 15],
  }
  local after = first + TOPIC_KEY_COUNT
  K.topics, K.delayed_index, K.ready_index, K.receipts_index = KEYS[after], KEYS[after + 1], KEYS[after + 2], KEYS[after + 3]
  K.leases, K.leases_lex = KEYS[after + 4], KEYS[after + 5]  -- the partition's (leases.lua)
  K.metas, K.bodies = KEYS[after + 6], KEYS[after + 7]  -- the partition's job hashes (jobs.lua)
  if K.old_meta == K.metas then  -- no job left in the topic's own hashes (keys.py key_group)
    K.old_meta, K.old_bodies = nil, nil
  end
  if K.topics then
    K.name = string.sub(K.delayed, #K.topics - #'_topics' + 1, -#':delayed' - 1)
  end
  return K
end
