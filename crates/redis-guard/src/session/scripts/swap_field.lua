-- Compare and set one field of a live session (`Session::compare_and_set`).
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs), field, '1' when a value is expected or '0' when the field is
--          expected absent, the expected text ('' when absent), the new value
-- Reply    {'1', new} when set (the session is marked used), {'0', current} or {'0'} (absent)
--          when the field held something else, or nil when there is no live session
local now, idle = clock(), tonumber(ARGV[2])
local exp = live(KEYS[1], now, idle)
if exp == nil then return false end
local current = redis.call('HGET', KEYS[1], ARGV[3])
local matches
if ARGV[4] == '1' then matches = current == ARGV[5] else matches = not current end
if not matches then
  if current then return {'0', current} end
  return {'0'}
end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[6])
touch(KEYS[1], now, exp, idle)
return {'1', ARGV[6]}
