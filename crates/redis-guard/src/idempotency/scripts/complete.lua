-- Completes a claimed idempotency record: the request's response replaces its claim, kept for
-- the retention. Does nothing when the key holds another request's live claim, a completed
-- record, or a value that is not a record.
--
-- KEYS[1]  the record's key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- ARGV[2]  the claiming request's token
-- ARGV[3]  the retention, µs
-- ARGV[4]  the rest of the completed record (fingerprint, then the response)
-- Reply    1 when stored, 0 when not
local now = clock()
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return 0
end
if v then
  local kind, till, token = string.match(v, '^RGI1 ([FD]) (%d+) (%S+)\n')
  if not kind or kind == 'D' or (token ~= ARGV[2] and tonumber(till) > now) then
    return 0
  end
end
local keep = tonumber(ARGV[3])
local line = string.format('RGI1 D %.0f %s\n', now + keep, ARGV[2])
redis.call('SET', KEYS[1], line .. ARGV[4], 'PX', math.max(1, math.ceil(keep / 1000)))
return 1
