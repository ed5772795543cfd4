-- delete: ARGV 4 receipt. 1 deleted, 0 the receipt is not in flight.
settle()
local seq = in_flight(ARGV[4])
if not seq then
  return 0
end
local _, group = decode(redis.call('HGET', K_MSGS, seq))
redis.call('ZREM', K_VIS, seq)
redis.call('HDEL', K_HELD, seq)
remove(seq, group)
return 1
