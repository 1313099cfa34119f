-- Callbacks: a job whose topic has `on_done` (or `on_dead`) leaves, in the Lua call that makes it
-- done (or dead), a record in its partition's outbox; the sweeper turns each record into a job of
-- the callback topic (callbacks.lua makes them, wherever their partition is) and then drops it
-- (outbox_trim.lua). Written in the settling call, a record exists exactly when the settlement
-- happened: an ack or a fail refused by the lease token writes none, and one per life of the job.
--
-- A record is a JSON array: seq (from the partition's _seq counter: increasing, so that the
-- callback topic's partition can tell a record it already made a job of), the callback topic, the
-- job's topic, id, flow key ('' for none), outcome ('done' or 'dead'), attempts, started_at_ms (''
-- when not known), ended_at_ms, body (its JSON text), then the result as stored (core/job.py
-- encode_result) for 'done' or the error for 'dead'. Numbers are strings: cjson keeps 14 digits.

-- The outbox of a call: the partition's _seq counter and _outbox list, and the records to push.
local function outbox_of(seq_key, list_key)
  return {seq = seq_key, list = list_key, records = {}}
end

-- A record of job `id` of topic K, with flow key `key` ('' none), after `attempts`, for callback
-- topic `target`.
local function callback_add(O, target, K, id, key, attempts, outcome, started_at, ended_at, body, detail)
  O.records[#O.records + 1] = {
    target, K.name, id, key, outcome, tostring(attempts), tostring(started_at), tostring(ended_at), body or 'null',
    detail,
  }
end

-- Pushes the call's records to the outbox, numbered in order. Returns how many.
local function outbox_flush(O)
  local n = #O.records
  if n > 0 then
    local seq = redis.call('INCRBY', O.seq, n) - n
    local encoded = {}
    for i, record in ipairs(O.records) do
      table.insert(record, 1, tostring(seq + i))
      encoded[i] = cjson.encode(record)
    end
    redis.call('RPUSH', O.list, unpack(encoded))
    O.records = {}
  end
  return n
end
