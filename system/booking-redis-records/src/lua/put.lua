-- put / replace: ARGV[4..6] = condition kind, status, payment; ARGV[7..] =
-- the new record's attribute/value pairs (checked by the caller).
local cur = load()
if not holds(cur, ARGV[4], ARGV[5], ARGV[6]) then
  return failed(cur)
end
local new = {}
for i = 7, #ARGV, 2 do
  new[ARGV[i]] = ARGV[i + 1]
end
commit(cur, new, nil)
return {'OK', cjson.encode(new)}
