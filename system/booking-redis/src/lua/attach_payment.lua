-- Pending -> held: ARGV = candidate, token, payment_id, deadline_ms.
-- Answers 'done' | 'no_match' | 'paid'.
local candidate, token, payment, deadline_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('HEXISTS', PAID, candidate) == 1 then
  return 'paid'
end
local hold, err = hold_of(candidate)
if err then
  return err
end
if not hold or hold.state ~= 'p' or hold.token ~= token then
  return 'no_match'
end
redis.call('HSET', HOLDS, candidate,
  'h|' .. hold.level .. '|' .. hold.token .. '|' .. payment .. '|' .. deadline_ms)
redis.call('ZREM', PENDING, candidate)
return 'done'
