-- HELD -> PAID: ARGV[4..7] = payment, confirm path, paid_ms, keep_ttl ('1'
-- only under the zoo's paid_keeps_ttl bug). Removes the TTL attribute and
-- the record from the held and TTL indexes.
local payment, path, paid_ms, keep_ttl = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local cur = load()
if not held_with(cur, payment) then
  return failed(cur)
end
local new = copy(cur)
new.status = 'PAID'
new.paid_ms = paid_ms
new.paid_by = path
if keep_ttl ~= '1' then
  new.expires_at_s = nil
end
commit(cur, new, nil)
return {'OK', cjson.encode(new)}
