-- Set one field of a live session unless it holds a value, and return the value that won
-- (`Session::ensure`: one CSRF token per session even under concurrent first requests).
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs), field, value
-- Reply    the value the field holds afterwards (the session is marked used when it was set),
--          or nil when there is no live session (nothing is written)
local now, idle = clock(), tonumber(ARGV[2])
local exp = live(KEYS[1], now, idle)
if exp == nil then return false end
local current = redis.call('HGET', KEYS[1], ARGV[3])
if current then return current end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
touch(KEYS[1], now, exp, idle)
return ARGV[4]
