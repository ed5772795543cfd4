-- Marks candidates eligible: ARGV = candidates. Answers how many were new.
local new = 0
for i = 1, #ARGV do
  new = new + redis.call('SADD', ELIGIBLE, ARGV[i])
end
return new
