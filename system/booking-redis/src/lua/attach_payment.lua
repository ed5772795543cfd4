-- Pending -> held: ARGV = candidate, token, payment_id, deadline_ms.
-- Answers 'done' | 'no_match' | 'paid'. Attaching the same payment again with
-- the same token is 'done' (a retried attach must not look like a lost hold).
local candidate, token, payment, deadline_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('HEXISTS', PAID, candidate) == 1 then
  return 'paid'
end
local hold, err = hold_of(candidate)
if err then
  return err
end
if hold and hold.state == 'h' and hold.token == token and hold.payment == payment then
  return 'done'
end
if not hold or hold.state ~= 'p' or hold.token ~= token then
  return 'no_match'
end
redis.call('HSET', HOLDS, candidate,
  'h|' .. hold.level .. '|' .. hold.token .. '|' .. payment .. '|' .. deadline_ms)
redis.call('ZREM', PENDING, candidate)
redis.call('ZADD', HELD, deadline_ms, candidate)
return 'done'
