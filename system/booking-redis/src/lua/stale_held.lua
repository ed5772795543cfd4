-- Held holds whose deadline is at or before ARGV[1] ms, earliest deadline
-- first, ties by candidate (a sorted set orders equal scores by member), at
-- most ARGV[2]: {candidate, hold, candidate, hold, ...}.
local candidates = redis.call('ZRANGEBYSCORE', HELD, '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local out = {}
for _, candidate in ipairs(candidates) do
  local hold = redis.call('HGET', HOLDS, candidate)
  if not hold then
    return corrupt('held ' .. candidate .. ' has no hold')
  end
  out[#out + 1] = candidate
  out[#out + 1] = hold
end
return out
