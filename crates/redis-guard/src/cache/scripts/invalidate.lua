-- Invalidates a tag: records when, so that every entry computed before now is void.
--
-- KEYS[1]  the tag's key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- ARGV[2]  how long to keep the record, ms: at least the longest life of an entry
-- Reply    now, µs (the tag's new invalidation time; it never moves back)
local now = clock()
local old = redis.pcall('GET', KEYS[1])
if type(old) == 'string' and tonumber(old) and tonumber(old) > now then
  now = tonumber(old)
end
local v = fmt(now)
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return v
