-- Held -> paid: ARGV = candidate, payment_id. The seat stays counted for good.
-- Answers 'done' | 'no_match' | 'paid'.
local candidate, payment = ARGV[1], ARGV[2]

if redis.call('HEXISTS', PAID, candidate) == 1 then
  return 'paid'
end
local hold, err = hold_of(candidate)
if err then
  return err
end
if not hold or hold.state ~= 'h' or hold.payment ~= payment then
  return 'no_match'
end
-- a held hold is not in the pending set: attaching the payment took it out
redis.call('HDEL', HOLDS, candidate)
redis.call('ZREM', HELD, candidate)
redis.call('HSET', PAID, candidate, hold.level .. '|' .. payment)
return 'done'
