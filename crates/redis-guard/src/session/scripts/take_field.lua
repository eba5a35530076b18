-- Read and delete one field of a live session, in one step (`Session::take`: a flash message
-- is shown once even when two requests read it at the same moment).
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs), field
-- Reply    {value} when the field was there (it is deleted and the session marked used), {}
--          when it is absent, or nil when there is no live session
local now, idle = clock(), tonumber(ARGV[2])
local exp = live(KEYS[1], now, idle)
if exp == nil then return false end
local value = redis.call('HGET', KEYS[1], ARGV[3])
if not value then return {} end
redis.call('HDEL', KEYS[1], ARGV[3])
touch(KEYS[1], now, exp, idle)
return {value}
