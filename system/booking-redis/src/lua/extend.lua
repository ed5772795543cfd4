-- Moves a held hold's deadline: ARGV = candidate, payment_id, deadline_ms.
-- Answers 'done' | 'no_match' | 'paid'.
local candidate, payment, deadline_ms = ARGV[1], ARGV[2], ARGV[3]

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
redis.call('HSET', HOLDS, candidate,
  'h|' .. hold.level .. '|' .. hold.token .. '|' .. payment .. '|' .. deadline_ms)
redis.call('ZADD', HELD, deadline_ms, candidate)
return 'done'
