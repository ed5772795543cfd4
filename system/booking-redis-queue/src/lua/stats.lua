-- stats: { visible, in flight, sent ms of the oldest message or '', now ms }.
settle()
local total = redis.call('ZCARD', K_ORDER)
local in_flight_n = redis.call('ZCARD', K_VIS)
local oldest = ''
local first = redis.call('ZRANGE', K_ORDER, 0, 0)[1]
if first then
  oldest = decode(redis.call('HGET', K_MSGS, first))
end
return { total - in_flight_n, in_flight_n, oldest, NOW_S }
