-- The application's conditional delete: ARGV[4..6] = condition kind, status,
-- payment (never not_exists: the caller refuses it). Answers the deleted record.
local cur = load()
if cur == nil or not holds(cur, ARGV[4], ARGV[5], ARGV[6]) then
  return failed(cur)
end
commit(cur, nil, nil)
return {'OK', cjson.encode(cur)}
