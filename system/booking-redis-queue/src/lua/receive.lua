-- receive: ARGV 4 max messages, 5 visibility timeout ms.
-- { {receipt, receive count, stored message}, ... }: the ready groups by
-- oldest head, each group's consecutive visible messages from its head.
settle()
local max = tonumber(ARGV[4])
local visible_at = NOW + tonumber(ARGV[5])
local batch = {}
while #batch < max do
  local popped = redis.call('ZPOPMIN', K_READY)
  local group = popped[1]
  if not group then
    break
  end
  local members = redis.call('ZRANGEBYLEX', K_GROUPS, '[' .. group .. ' ', '(' .. group .. '!', 'LIMIT', 0, max - #batch)
  for _, member in ipairs(members) do
    local seq = member_seq(group, member)
    if redis.call('HEXISTS', K_HELD, seq) == 1 then
      break
    end
    local raw = redis.call('HGET', K_MSGS, seq)
    if not raw then
      return redis.error_reply('CORRUPT queue message ' .. seq .. ' listed in its group, not stored')
    end
    local count = redis.call('HINCRBY', K_RECV, seq, 1)
    local receipt = seq .. '-' .. redis.call('HINCRBY', K_IDS, 'receipt', 1)
    redis.call('HSET', K_HELD, seq, receipt)
    redis.call('ZADD', K_VIS, visible_at, seq)
    batch[#batch + 1] = { receipt, count, raw }
  end
end
return batch
