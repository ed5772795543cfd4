-- The payment-guarded undo: ARGV = candidate, payment_id.
-- Removes a held hold with this payment and gives its seat back.
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
err = drop_hold(candidate, hold)
if err then
  return err
end
return 'done'
