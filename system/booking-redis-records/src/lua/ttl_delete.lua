-- The TTL service's delete of one record: ARGV[4] = the latest expires_at_s
-- due now. Only a record that still carries a TTL that old is deleted (a
-- record paid or extended since the sweep listed it is not); its REMOVE
-- carries the TTL service's identity.
local cutoff = tonumber(ARGV[4])
local cur = load()
if cur == nil or cur.expires_at_s == nil or tonumber(cur.expires_at_s) > cutoff then
  return failed(cur)
end
commit(cur, nil, 'ttl')
return {'OK', cjson.encode(cur)}
