-- The email latch: ARGV[4] = payment. Only a PAID record with that payment
-- whose email was not sent yet.
local payment = ARGV[4]
local cur = load()
if cur == nil or cur.status ~= 'PAID' or cur.payment_id ~= payment or cur.email_sent == '1' then
  return failed(cur)
end
local new = copy(cur)
new.email_sent = '1'
commit(cur, new, nil)
return {'OK', cjson.encode(new)}
