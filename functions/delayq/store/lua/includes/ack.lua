-- Acknowledging jobs of one topic whose handler succeeded (ack.lua, and take.lua for the acks that
-- ride with a take): each is done, kept as a receipt (receipts.lua) for the topic's keep_done, or
-- gone at once when that is 0. A receipt's result (what its handler answered, core/job.py
-- encode_result) takes its body's place in the bodies hash: a done job has no body.
--
-- A job is acknowledged only while it is still leased with the given token: the late answer of an
-- attempt whose lease expired (and that may be leased again by now), or of a cancelled job, changes
-- nothing. Once the topic keeps more than its keep_done_max receipts, the oldest are forgotten, in
-- chunks (at most ACK_FORGET_MORE more than the jobs acknowledged): bounded work; the sweep forgets
-- the expired (forget.lua).

-- @include meta
-- @include time
-- @include receipts
-- @include topic_index
-- @include leases
-- @include flow
-- @include callbacks
-- @include jobs

local ACK_FORGET_MORE = 64  -- receipts forgotten beyond the jobs acknowledged, at most: the chunk

local ACK_VALUES = 4  -- ARGV values per acknowledged job (calls.py Ack)

-- Acknowledges the jobs of ARGV[first .. last], ACK_VALUES each: id, lease token, started_at_ms (when
-- the attempt's handler started, Redis time), result ('': none); `now` is Redis' time in ms. With
-- `alone` false the caller (a take) forgets an emptied topic itself (forget_topic_if_empty) once done
-- with it. With `on_done` (the topic's callback topic, '' for none), each job
-- acknowledged leaves a record in the outbox O (callbacks.lua). Returns the number of jobs
-- acknowledged.
local function ack_jobs(K, now, keep_ms, keep_max, first, last, alone, O, on_done)
  local ids = {}
  for i = first, last, ACK_VALUES do
    ids[#ids + 1] = ARGV[i]
  end
  if #ids == 0 then
    return 0
  end
  local suffix = ':' .. now  -- each receipt's lease field: 'started_at:done_at'
  local done, receipts, keys, results, plain = {}, {}, {}, {}, {}
  local done_at, heads = {}, {}  -- of each job done: where its values start, its meta's head
  local length = nil  -- the done list's, once the receipts are pushed
  local metas = metas_get(K, ids)
  for i, id in ipairs(ids) do
    local raw = metas[i]
    if raw then
      -- Matched as text (meta.lua): 'l|attempts|run_at|enqueued_at|token|overrides' becomes
      -- 'd|attempts|run_at|enqueued_at|started_at:done_at|overrides'.
      local head, token, overrides = string.match(raw, RESERVED_META)
      local at = first + ACK_VALUES * (i - 1)
      if token == ARGV[at + 1] then
        done[#done + 1] = id
        done_at[#done], heads[#done] = at, head
        keys[#keys + 1] = overrides_key(string.sub(overrides, 2))  -- '|retries|...'
        if keep_ms > 0 then
          receipts[#receipts + 1] = id
          receipts[#receipts + 1] = DONE .. head .. ARGV[at + 2] .. suffix .. overrides
        end
        if keep_ms > 0 and ARGV[at + 3] ~= '' then
          results[#results + 1], results[#results + 2] = id, ARGV[at + 3]
        else
          plain[#plain + 1] = id
        end
      end
    end
  end
  if #done > 0 and on_done ~= '' then
    local bodies = bodies_get(K, done)
    for i, id in ipairs(done) do
      local at, attempts = done_at[i], string.match(heads[i], '^|(%d+)|')
      callback_add(O, on_done, K, id, keys[i], attempts, 'done', ARGV[at + 2], now, bodies[i], ARGV[at + 3])
    end
  end
  if #done > 0 then
    lease_remove(K, done)
    flow_release(K, keys)
    if #plain > 0 then
      bodies_delete(K, plain)
    end
    if #results > 0 then
      bodies_set(K, results)  -- over the body
    end
    if keep_ms > 0 then
      metas_set(K, receipts)
      length = push_receipts(K, done)
      if length == #done then  -- the first receipts: else the index has an earlier one
        index_receipts(K, now + keep_ms)
      end
    else
      metas_delete(K, done)
      redis.call('HDEL', K.errors, unpack(done))
      if alone then
        forget_topic_if_empty(K)
      end
    end
  end
  forget_receipts(K, now, keep_ms, keep_max, #done + ACK_FORGET_MORE, false, ACK_FORGET_MORE, length)
  return #done
end
