-- Load a session and mark it used, in one round trip.
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs)
-- Reply    the hash as a flat field/value array, or nil when there is no live session (an
--          expired one is deleted)
local now, idle = clock(), tonumber(ARGV[2])
local exp = live(KEYS[1], now, idle)
if exp == nil then return false end
touch(KEYS[1], now, exp, idle)
return redis.call('HGETALL', KEYS[1])
