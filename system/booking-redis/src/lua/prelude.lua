-- Prepended to every ledger script (each script is still loaded and run on
-- its own, by SHA). Every script gets the same eight keys, all of one sale, all
-- with the sale's hash tag, so a Redis Cluster runs it on one node. PENDING
-- scores pending holds by admission time, HELD scores held holds by deadline.
local OPEN, LEVELS, COUNTS, ELIGIBLE, HOLDS, PAID, PENDING, HELD =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]

-- Redis does not roll a script back when it fails half way, so every script
-- reads and checks everything first and writes last: a corrupt record stops
-- the script before its first write.
local function corrupt(what)
  return redis.error_reply('CORRUPT ' .. what)
end

-- Ids never contain '|' (the id types refuse it), so '|' separates fields.
local function split(s)
  local fields = {}
  for field in string.gmatch(s, '[^|]+') do
    fields[#fields + 1] = field
  end
  return fields
end

-- A hold as the scripts write it:
--   pending: p|<level>|<token>|<admitted_ms>
--   held:    h|<level>|<token>|<payment_id>|<deadline_ms>
-- Anything else is nil.
local function read_hold(s)
  local f = split(s)
  if f[1] == 'p' and #f == 4 then
    return { state = 'p', level = f[2], token = f[3], admitted_ms = f[4] }
  elseif f[1] == 'h' and #f == 5 then
    return { state = 'h', level = f[2], token = f[3], payment = f[4], deadline_ms = f[5] }
  end
  return nil
end

-- The candidate's hold, false if there is none, or a CORRUPT error reply.
local function hold_of(candidate)
  local raw = redis.call('HGET', HOLDS, candidate)
  if not raw then
    return false
  end
  local hold = read_hold(raw)
  if not hold then
    return nil, corrupt('hold of ' .. candidate .. ': ' .. raw)
  end
  return hold
end

-- Removes the candidate's hold and gives its seat back. Returns an error
-- reply, before writing, if the counter is unreadable (CORRUPT), or if it is
-- already zero or missing while the hold is counted in it: an undo below zero
-- is a corrupt ledger ('UNDERFLOW <level>'), never clamped (as the model).
local function drop_hold(candidate, hold)
  local raw = redis.call('HGET', COUNTS, hold.level)
  local count = raw and tonumber(raw)
  if raw and not count then
    return corrupt('count of level ' .. hold.level .. ': ' .. raw)
  end
  if not count or count < 1 then
    return redis.error_reply('UNDERFLOW ' .. hold.level)
  end
  redis.call('HDEL', HOLDS, candidate)
  redis.call('ZREM', PENDING, candidate)
  redis.call('ZREM', HELD, candidate)
  redis.call('HINCRBY', COUNTS, hold.level, -1)
  return nil
end
