-- Invalidates a tag: records when, so that every entry computed before now is void.
--
-- KEYS[1]  the tag's key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- ARGV[2]  how long to keep the record, ms: at least the longest life of an entry
-- Reply    now, µs (the tag's new invalidation time; it never moves back)
-- ARGV[1] `=<µs>`: a test's frozen clock (feature test-util), read instead of TIME.
local now = string.byte(ARGV[1]) == 61 and tonumber(string.sub(ARGV[1], 2)) or nil
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
end
local old = redis.pcall('GET', KEYS[1])
if type(old) == 'string' and tonumber(old) and tonumber(old) > now then
  now = tonumber(old)
end
local v = string.format('%.0f', now)
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return v
