-- Atomically add to an integer field of a live session.
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs), field, increment
-- Reply    the new value, or nil when there is no live session; an error with code
--          RG_NOT_INTEGER when the field holds something else than an integer
local now, idle = clock(), tonumber(ARGV[2])
local exp = live(KEYS[1], now, idle)
if exp == nil then return false end
local current = redis.call('HGET', KEYS[1], ARGV[3])
if current and not string.match(current, '^%-?%d+$') then
  return redis.error_reply('RG_NOT_INTEGER the field does not hold an integer')
end
local value = redis.call('HINCRBY', KEYS[1], ARGV[3], ARGV[4])
touch(KEYS[1], now, exp, idle)
return value
