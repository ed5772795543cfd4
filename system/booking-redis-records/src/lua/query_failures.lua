-- Counts a failed gateway query ('note') or clears the count ('clear') on a
-- record HELD with ARGV[4] = payment; ARGV[5] = 'note' | 'clear'.
local payment, mode = ARGV[4], ARGV[5]
local cur = load()
if not held_with(cur, payment) then
  return failed(cur)
end
local new = copy(cur)
if mode == 'note' then
  new.query_failures = tostring(math.min(tonumber(cur.query_failures) + 1, 4294967295))
else
  new.query_failures = '0'
end
commit(cur, new, nil)
return {'OK', cjson.encode(new)}
