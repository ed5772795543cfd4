-- change_visibility: ARGV 4 receipt, 5 timeout ms from now.
-- 1 changed, 0 the receipt is not in flight. A zero timeout makes the
-- message visible (or dead) at once.
settle()
local seq = in_flight(ARGV[4])
if not seq then
  return 0
end
redis.call('ZADD', K_VIS, NOW + tonumber(ARGV[5]), seq)
settle()
return 1
