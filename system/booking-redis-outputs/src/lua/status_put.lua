-- Replaces the status document and appends the write to its history, in one
-- step: no reader ever sees a current document whose write is not in the
-- history, nor a history entry that is not (or was not) the current one.
--
-- KEYS[1] the current document (string)
-- KEYS[2] the write history (list of `<at_ms>|<document>`, oldest first)
-- ARGV[1] at_ms, the writer's clock
-- ARGV[2] the whole document
-- ARGV[3] how many writes the history keeps (the newest)
local keep = tonumber(ARGV[3])
if not keep or keep < 1 then
  return redis.error_reply('BAD_KEEP ' .. tostring(ARGV[3]))
end
redis.call('SET', KEYS[1], ARGV[2])
local length = redis.call('RPUSH', KEYS[2], ARGV[1] .. '|' .. ARGV[2])
if length > keep then
  redis.call('LTRIM', KEYS[2], -keep, -1)
end
return length
