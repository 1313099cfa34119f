-- The keys of one topic, starting at KEYS[first]: the topic's own, in the order of keys.py TOPIC_KEYS,
-- then the partition's keys that index its topics, in the order of keys.py TOPIC_INDEX_KEYS
-- (keys.py Partition.key_group). Scripts that take several topics find group g at
-- KEYS[first + (g - 1) * KEY_GROUP_SIZE]. K.name is the topic's name, read off its keys: keys.py
-- names a topic key prefix .. topic .. ':' .. kind, and the partition's _topics prefix .. '_topics'.
local TOPIC_KEY_COUNT = 17
local KEY_GROUP_SIZE = TOPIC_KEY_COUNT + 5
local function topic_keys(first)
  local K = {
    delayed = KEYS[first], ready = KEYS[first + 1], leased = KEYS[first + 2], dead = KEYS[first + 3],
    meta = KEYS[first + 4], bodies = KEYS[first + 5], errors = KEYS[first + 6], control = KEYS[first + 7],
    done = KEYS[first + 8], fair = KEYS[first + 9], turns = KEYS[first + 10], flows = KEYS[first + 11],
    busy = KEYS[first + 12], pace = KEYS[first + 13], held = KEYS[first + 14], parked = KEYS[first + 15],
    wake = KEYS[first + 16],
  }
  local after = first + TOPIC_KEY_COUNT
  K.topics, K.delayed_index, K.leased_index, K.ready_index = KEYS[after], KEYS[after + 1], KEYS[after + 2], KEYS[after + 3]
  K.receipts_index = KEYS[after + 4]
  if K.topics then
    K.name = string.sub(K.delayed, #K.topics - #'_topics' + 1, -#':delayed' - 1)
  end
  return K
end
