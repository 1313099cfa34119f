-- The keys of one topic, starting at KEYS[first], in the order of keys.py TOPIC_KEYS; scripts that
-- take several topics find group g at KEYS[first + (g - 1) * TOPIC_KEY_COUNT].
local TOPIC_KEY_COUNT = 9
local function topic_keys(first)
  return {
    delayed = KEYS[first], ready = KEYS[first + 1], leased = KEYS[first + 2], dead = KEYS[first + 3],
    meta = KEYS[first + 4], bodies = KEYS[first + 5], errors = KEYS[first + 6], control = KEYS[first + 7],
    done = KEYS[first + 8],
  }
end
