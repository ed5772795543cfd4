-- The records' shared prelude: every write script takes the same keys and
-- the same first three arguments.
--   KEYS[1] rec:<candidate>  hash, one field per attribute
--   KEYS[2] rec-payments     hash payment_id -> candidate
--   KEYS[3] rec-held         sorted set: HELD candidates by deadline_ms
--   KEYS[4] rec-ttl          sorted set: candidates with a TTL, by expires_at_s
--   KEYS[5] rec-all          sorted set (all scores 0): every candidate, by name
--   KEYS[6] rec-stream       stream: the change stream, ids <sequence>-0
--   KEYS[7] rec-seq          string: the last sequence written
--   KEYS[8] rec-owed         sorted set: PAID candidates whose email is owed
--                            (email_sent not '1'), by paid_ms
--   ARGV[1] candidate, ARGV[2] now (ms, the caller's clock), ARGV[3] stream
--   entries kept at most.
-- A script checks before its first write (Redis does not roll a failed
-- script back) and answers {'OK', <json>} or {'FAILED', <json of the current
-- record, absent if none>}.
local REC, PAYMENTS, HELD, TTL, ALL, STREAM, SEQ, OWED =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local candidate, now_ms, retained = ARGV[1], ARGV[2], ARGV[3]

-- The current record as a table of attribute -> string, nil if absent.
local function load()
  local flat = redis.call('HGETALL', REC)
  if #flat == 0 then
    return nil
  end
  local r = {}
  for i = 1, #flat, 2 do
    r[flat[i]] = flat[i + 1]
  end
  return r
end

local function copy(r)
  local c = {}
  for k, v in pairs(r) do
    c[k] = v
  end
  return c
end

local function same(a, b)
  if a == nil or b == nil then
    return a == b
  end
  for k, v in pairs(a) do
    if b[k] ~= v then
      return false
    end
  end
  for k, v in pairs(b) do
    if a[k] ~= v then
      return false
    end
  end
  return true
end

-- booking::records::Condition::holds, over the stored attributes.
local function holds(cur, kind, status, payment)
  if kind == 'not_exists' then
    return cur == nil
  end
  if cur == nil then
    return false
  end
  if kind == 'status_payment' then
    return cur.status == status and cur.payment_id == payment
  end
  if kind == 'payment' then
    return cur.payment_id == payment
  end
  error('unknown condition ' .. tostring(kind))
end

local function held_with(cur, payment)
  return cur ~= nil and cur.status == 'HELD' and cur.payment_id == payment
end

-- BookingRecord::check, over the stored attributes: why `r` breaks an
-- invariant, nil if it keeps them all. Every update checks its result, as
-- the embedded store does (the zoo's paid_keeps_ttl alone writes unchecked).
local function check(r)
  if r.status == 'PAID' then
    if r.expires_at_s ~= nil then
      return 'PAID record of ' .. r.candidate .. ' carries a TTL (' .. r.expires_at_s
        .. '): it would be deleted'
    end
    if r.paid_ms == nil or r.paid_by == nil then
      return 'PAID record of ' .. r.candidate .. ' without paid_ms/paid_by'
    end
  else
    if r.expires_at_s == nil then
      return 'HELD record of ' .. r.candidate .. ' without a TTL: no safety net'
    end
    if r.paid_ms ~= nil or r.paid_by ~= nil or r.email_sent == '1' then
      return 'HELD record of ' .. r.candidate .. ' with payment details'
    end
  end
  if tonumber(r.deadline_ms) < tonumber(r.created_ms) then
    return 'record of ' .. r.candidate .. ': deadline ' .. r.deadline_ms .. ' before creation '
      .. r.created_ms
  end
  return nil
end

-- The answer refusing a result that breaks an invariant (nothing written).
local function invalid(why)
  return redis.error_reply('INVALID ' .. why)
end

local function failed(cur)
  if cur == nil then
    return {'FAILED'}
  end
  return {'FAILED', cjson.encode(cur)}
end

-- Makes `new` the record (nil: delete it), keeps every index in step and
-- appends the stream entry (`who`: 'ttl' for the TTL service, else nil). A
-- write that changes nothing writes nothing, no stream entry either.
local function commit(old, new, who)
  if same(old, new) then
    return
  end
  if old ~= nil and (new == nil or old.payment_id ~= new.payment_id) then
    if redis.call('HGET', PAYMENTS, old.payment_id) == candidate then
      redis.call('HDEL', PAYMENTS, old.payment_id)
    end
  end
  redis.call('DEL', REC)
  if new ~= nil then
    local flat = {}
    for k, v in pairs(new) do
      flat[#flat + 1] = k
      flat[#flat + 1] = v
    end
    redis.call('HSET', REC, unpack(flat))
    redis.call('HSET', PAYMENTS, new.payment_id, candidate)
    if new.status == 'HELD' then
      redis.call('ZADD', HELD, new.deadline_ms, candidate)
    else
      redis.call('ZREM', HELD, candidate)
    end
    if new.expires_at_s ~= nil then
      redis.call('ZADD', TTL, new.expires_at_s, candidate)
    else
      redis.call('ZREM', TTL, candidate)
    end
    if new.status == 'PAID' and new.email_sent ~= '1' and new.paid_ms ~= nil then
      redis.call('ZADD', OWED, new.paid_ms, candidate)
    else
      redis.call('ZREM', OWED, candidate)
    end
    redis.call('ZADD', ALL, 0, candidate)
  else
    redis.call('ZREM', HELD, candidate)
    redis.call('ZREM', TTL, candidate)
    redis.call('ZREM', OWED, candidate)
    redis.call('ZREM', ALL, candidate)
  end
  local kind = 'MODIFY'
  if old == nil then
    kind = 'INSERT'
  elseif new == nil then
    kind = 'REMOVE'
  end
  local entry = {'kind', kind, 'at', now_ms}
  if old ~= nil then
    entry[#entry + 1] = 'old'
    entry[#entry + 1] = cjson.encode(old)
  end
  if new ~= nil then
    entry[#entry + 1] = 'new'
    entry[#entry + 1] = cjson.encode(new)
  end
  if who ~= nil then
    entry[#entry + 1] = 'who'
    entry[#entry + 1] = who
  end
  local seq = redis.call('INCR', SEQ)
  redis.call('XADD', STREAM, 'MAXLEN', '=', retained, string.format('%d-0', seq), unpack(entry))
end
