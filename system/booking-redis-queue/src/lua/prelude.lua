-- The queue's prelude: key names, the message encoding, and settle (the
-- passage of time), shared by every script.
--
-- KEYS (all under the sale's hash tag):
--   1 ids      hash   `seq` -> last message number, `receipt` -> last receive number
--   2 msgs     hash   seq -> `<sent_ms> <group> <message json>`
--   3 order    zset   seq, scored by its number: every message not deleted, by send
--   4 groups   zset   `<group> <seq>`, all scored 0: each group's messages in order (lex)
--   5 ready    zset   group, scored by its head's number: groups whose head is visible
--   6 vis      zset   seq, scored by the ms it is visible again: messages in flight
--   7 held     hash   seq -> receipt of the receive in flight
--   8 recv     hash   seq -> receives so far
--   9 dedup    zset   `<group> <deduplication id>`, scored by the first send's ms
--  10 dead     list   message json: the dead-letter queue, oldest first
-- ARGV: 1 now: the client's ms, or 'server' for the server's TIME when the
-- script runs; 2 deduplication window ms, 3 receives max, then the script's
-- own.
--
-- A seq is the message number as 16 zero-padded digits, so lexical order is
-- send order everywhere. Group and deduplication IDs are printable ASCII
-- without spaces (the adapter checks), so a space separates fields.

local K_IDS, K_MSGS, K_ORDER, K_GROUPS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_READY, K_VIS, K_HELD, K_RECV = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_DEDUP, K_DEAD = KEYS[9], KEYS[10]

-- the time every step of this script counts with. On the real clock it is
-- the server's, read as the script runs (a time the client read when it
-- issued the call is stale by however long the call waited: a receive would
-- hide its messages until a deadline already past). TIME is allowed in a
-- script under effects replication (Redis >= 5, the only mode since 7).
local function now_ms()
  if ARGV[1] == 'server' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local ms = tonumber(ARGV[1])
  if not ms then
    error({ err = 'ERR queue time neither ms nor server: ' .. tostring(ARGV[1]) })
  end
  return ms
end
local NOW = now_ms()
local NOW_S = string.format('%d', NOW)
local WINDOW = tonumber(ARGV[2])
local RECEIVES_MAX = tonumber(ARGV[3])
-- messages whose visibility ran out handled per call at most; the rest on
-- the next call (keeps one script short after a long outage)
local SETTLE_MAX = 10000

local function seq_text(n)
  return string.format('%016d', n)
end

-- `<group> <seq>`: the member of `groups`
local function group_member(group, seq)
  return group .. ' ' .. seq
end

-- the seq of a `groups` member
local function member_seq(group, member)
  return string.sub(member, #group + 2)
end

-- (sent_ms, group, json) of a stored message
local function decode(raw)
  local sent, group, json = string.match(raw, '^(%d+) (%S+) (.*)$')
  if not sent then
    error({ err = 'CORRUPT queue message' })
  end
  return sent, group, json
end

-- the group's first message, or nil
local function head_of(group)
  local first = redis.call('ZRANGEBYLEX', K_GROUPS, '[' .. group .. ' ', '(' .. group .. '!', 'LIMIT', 0, 1)[1]
  if first then
    return member_seq(group, first)
  end
  return nil
end

-- the group is ready exactly when its head is visible
local function refresh(group)
  local head = head_of(group)
  if head and redis.call('HEXISTS', K_HELD, head) == 0 then
    redis.call('ZADD', K_READY, tonumber(head), group)
  else
    redis.call('ZREM', K_READY, group)
  end
end

-- removes a message (not in flight any more) from the queue
local function remove(seq, group)
  redis.call('HDEL', K_MSGS, seq)
  redis.call('HDEL', K_RECV, seq)
  redis.call('ZREM', K_ORDER, seq)
  redis.call('ZREM', K_GROUPS, group_member(group, seq))
  refresh(group)
end

-- the passage of time: deduplication IDs older than the window are
-- forgotten; a message whose visibility ran out is visible again, or moves
-- to the dead-letter queue once it was received RECEIVES_MAX times
local function settle()
  redis.call('ZREMRANGEBYSCORE', K_DEDUP, '-inf', NOW - WINDOW)
  local due = redis.call('ZRANGEBYSCORE', K_VIS, '-inf', NOW, 'LIMIT', 0, SETTLE_MAX)
  for _, seq in ipairs(due) do
    redis.call('ZREM', K_VIS, seq)
    redis.call('HDEL', K_HELD, seq)
    local raw = redis.call('HGET', K_MSGS, seq)
    if raw then
      local _, group, json = decode(raw)
      local count = tonumber(redis.call('HGET', K_RECV, seq) or '0')
      if count >= RECEIVES_MAX then
        remove(seq, group)
        redis.call('RPUSH', K_DEAD, json)
      else
        refresh(group)
      end
    end
  end
end

-- the seq of a receipt still in flight, or nil
local function in_flight(receipt)
  local seq = string.match(receipt, '^(%d+)%-%d+$')
  if seq and redis.call('HGET', K_HELD, seq) == receipt then
    return seq
  end
  return nil
end
