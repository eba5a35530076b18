-- First half of an id rotation: read a live session and delete it.
-- KEYS[1]  the old session hash
-- ARGV     shift, idle (µs)
-- Reply    the hash as a flat field/value array, or nil when there is no live session
local now, idle = clock(), tonumber(ARGV[2])
local exp = live(KEYS[1], now, idle)
if exp == nil then return false end
local data = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
return data
