-- Extends a hold: ARGV[4..6] = payment, new deadline_ms, its expires_at_s.
-- Counts the extension and clears the failed queries. A deadline before the
-- record's creation is refused (INVALID), after the condition is checked.
local payment, deadline_ms, expires_at_s = ARGV[4], ARGV[5], ARGV[6]
local cur = load()
if not held_with(cur, payment) then
  return failed(cur)
end
if tonumber(deadline_ms) < tonumber(cur.created_ms) then
  return redis.error_reply('INVALID record of ' .. candidate .. ': deadline ' .. deadline_ms
    .. ' before creation ' .. cur.created_ms)
end
local new = copy(cur)
new.deadline_ms = deadline_ms
new.expires_at_s = expires_at_s
new.extensions = tostring(math.min(tonumber(cur.extensions) + 1, 4294967295))
new.query_failures = '0'
commit(cur, new, nil)
return {'OK', cjson.encode(new)}
