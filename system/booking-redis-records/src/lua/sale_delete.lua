-- The ops reset's delete of one record of a sale: ARGV[4] = the sale. Any
-- record of that sale goes, HELD or PAID, with its index entries; its REMOVE
-- carries no identity (an application delete: the expiry handler ignores
-- it). Answers the deleted record; a record of another sale (or none) is
-- left and answered as FAILED.
local cur = load()
if cur == nil or cur.sale ~= ARGV[4] then
  return failed(cur)
end
commit(cur, nil, nil)
return {'OK', cjson.encode(cur)}
