-- The token-guarded undo: ARGV = candidate, token.
-- Removes the hold made by this request (pending or held) and gives its seat
-- back. Answers 'done' | 'no_match' | 'paid'.
local candidate, token = ARGV[1], ARGV[2]

if redis.call('HEXISTS', PAID, candidate) == 1 then
  return 'paid'
end
local hold, err = hold_of(candidate)
if err then
  return err
end
if not hold or hold.token ~= token then
  return 'no_match'
end
err = drop_hold(candidate, hold)
if err then
  return err
end
return 'done'
