-- Reads a cache key, with the time it was read.
--
-- KEYS[1]  the entry's key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- Reply    {now µs, value or nil, 1 when the key holds another type (the value is then nil)}
-- ARGV[1] `=<µs>`: a test's frozen clock (feature test-util), read instead of TIME.
local now = string.byte(ARGV[1]) == 61 and tonumber(string.sub(ARGV[1], 2)) or nil
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
end
now = string.format('%.0f', now)
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return {now, false, 1}
end
return {now, v, 0}
