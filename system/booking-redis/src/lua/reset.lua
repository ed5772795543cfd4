-- Forgets the sale and sets its levels: ARGV = level, cap, level, cap, ...
-- The sale starts closed (no open key) with no eligible candidates. A level
-- named twice takes its last cap, as the model's map does.
redis.call('UNLINK', OPEN, LEVELS, COUNTS, ELIGIBLE, HOLDS, PAID, PENDING, HELD)
for i = 1, #ARGV, 2 do
  redis.call('HSET', LEVELS, ARGV[i], ARGV[i + 1])
  redis.call('HSET', COUNTS, ARGV[i], 0)
end
return 'ok'
