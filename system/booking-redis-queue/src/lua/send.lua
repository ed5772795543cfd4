-- send: ARGV 4 group, 5 deduplication id, 6 message json.
-- 1 queued, 0 deduplicated.
settle()
local group, dedup, json = ARGV[4], ARGV[5], ARGV[6]
local dedup_member = group .. ' ' .. dedup
if redis.call('ZSCORE', K_DEDUP, dedup_member) then
  return 0
end
redis.call('ZADD', K_DEDUP, NOW_S, dedup_member)
local n = redis.call('HINCRBY', K_IDS, 'seq', 1)
local seq = seq_text(n)
redis.call('HSET', K_MSGS, seq, NOW_S .. ' ' .. group .. ' ' .. json)
redis.call('ZADD', K_ORDER, n, seq)
redis.call('ZADD', K_GROUPS, 0, group_member(group, seq))
refresh(group)
return 1
