-- Releases a claim: deletes the record only while it is this request's claim (compare and
-- delete), so a retry runs the request again.
--
-- KEYS[1]  the record's key
-- ARGV[1]  a time shift in µs added to Redis TIME (unused: a release needs no time)
-- ARGV[2]  the claiming request's token
-- Reply    1 when released, 0 when the key held something else
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0
end
local token = string.match(v, '^RGI1 F %d+ (%S+)\n')
if token ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
