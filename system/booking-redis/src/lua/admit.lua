-- Admission: ARGV = candidate, level, token, now_ms.
-- Checks in the model's order: closed, unknown level, not eligible, paid,
-- holding, full; else counts the seat and records a pending hold.
-- Answers {'admitted', count} | {'closed'} | {'unknown_level'} |
-- {'not_eligible'} | {'paid', '<level>|<payment>'} | {'holding', <hold>} | {'full'}.
local candidate, level, token, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('GET', OPEN) ~= '1' then
  return { 'closed' }
end
local raw_cap = redis.call('HGET', LEVELS, level)
if not raw_cap then
  return { 'unknown_level' }
end
if redis.call('SISMEMBER', ELIGIBLE, candidate) == 0 then
  return { 'not_eligible' }
end
local paid = redis.call('HGET', PAID, candidate)
if paid then
  return { 'paid', paid }
end
local hold = redis.call('HGET', HOLDS, candidate)
if hold then
  return { 'holding', hold }
end
local cap = tonumber(raw_cap)
if not cap then
  return corrupt('cap of level ' .. level .. ': ' .. raw_cap)
end
local raw_count = redis.call('HGET', COUNTS, level)
local count = tonumber(raw_count or '0')
if not count then
  return corrupt('count of level ' .. level .. ': ' .. raw_count)
end
if count >= cap then
  return { 'full' }
end
count = redis.call('HINCRBY', COUNTS, level, 1)
-- the level's high-water mark, beside its count ('|' is in no level name)
local peak = tonumber(redis.call('HGET', COUNTS, 'peak|' .. level) or '0') or 0
if count > peak then
  redis.call('HSET', COUNTS, 'peak|' .. level, count)
end
redis.call('HSET', HOLDS, candidate, 'p|' .. level .. '|' .. token .. '|' .. now_ms)
redis.call('ZADD', PENDING, now_ms, candidate)
return { 'admitted', count }
