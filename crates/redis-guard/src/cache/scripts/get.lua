-- Reads a cache key, with the time it was read.
--
-- KEYS[1]  the entry's key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- Reply    {now µs, value or nil, 1 when the key holds another type (the value is then nil)}
local now = fmt(clock())
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return {now, false, 1}
end
return {now, v, 0}
