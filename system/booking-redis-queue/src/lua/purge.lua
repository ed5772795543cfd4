-- purge (the ops reset): { visible, in flight, dead letters } removed. Every
-- message, the deduplication window and the dead-letter queue go; `ids`
-- stays, so message and receive numbers go on and no receipt a worker still
-- holds names a later message (its delete answers an invalid receipt).
settle()
local total = redis.call('ZCARD', K_ORDER)
local in_flight_n = redis.call('ZCARD', K_VIS)
local dead_n = redis.call('LLEN', K_DEAD)
redis.call('DEL', K_MSGS, K_ORDER, K_GROUPS, K_READY, K_VIS, K_HELD, K_RECV, K_DEDUP, K_DEAD)
return { total - in_flight_n, in_flight_n, dead_n }
