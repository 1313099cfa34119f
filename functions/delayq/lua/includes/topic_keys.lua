-- The seven keys of one topic, starting at KEYS[first], in the order of keys.py TOPIC_KEYS.
local function topic_keys(first)
  return {
    delayed = KEYS[first], ready = KEYS[first + 1], leased = KEYS[first + 2], dead = KEYS[first + 3],
    meta = KEYS[first + 4], bodies = KEYS[first + 5], errors = KEYS[first + 6],
  }
end
