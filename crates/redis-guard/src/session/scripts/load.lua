-- Load a session and mark it used, in one round trip.
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs)
-- Reply    the hash as a flat field/value array, or nil when there is no live session (an
--          expired one is deleted)
--
-- A session used again within 1 % of its idle timeout is not marked again: most read-only
-- requests then write nothing (no HSET, no PEXPIRE, nothing to replicate), and the idle timeout
-- still slides, counted from a use at most 1 % of it earlier.
local now, idle = clock(), tonumber(ARGV[2])
local exp, seen = live(KEYS[1], now, idle)
if exp == nil then return false end
if now - seen >= idle / 100 then
  touch(KEYS[1], now, exp, idle)
end
return redis.call('HGETALL', KEYS[1])
