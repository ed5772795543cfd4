-- dead_letters: the dead-letter queue's message json, oldest first.
settle()
return redis.call('LRANGE', K_DEAD, 0, -1)
