-- The figures, read in one step: {open, {level, cap, count, peak, ...}, paid}
-- (peak: the highest count an admission reached, 0 before the first)
-- (paid: how many candidates are marked paid, HLEN, O(1)).
-- Levels come in hash order; the adapter sorts them.
local open = redis.call('GET', OPEN) == '1' and 1 or 0
local levels = redis.call('HGETALL', LEVELS)
local figures = {}
for i = 1, #levels, 2 do
  local count = redis.call('HGET', COUNTS, levels[i])
  if not count then
    return corrupt('level ' .. levels[i] .. ' has a cap and no count')
  end
  figures[#figures + 1] = levels[i]
  figures[#figures + 1] = levels[i + 1]
  figures[#figures + 1] = count
  figures[#figures + 1] = redis.call('HGET', COUNTS, 'peak|' .. levels[i]) or '0'
end
return { open, figures, redis.call('HLEN', PAID) }
