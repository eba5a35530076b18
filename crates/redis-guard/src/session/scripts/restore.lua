-- Second half of an id rotation: write the data under the new id (the same $created and $exp:
-- rotation does not extend the absolute lifetime).
-- KEYS[1]  the new session hash
-- ARGV     shift, idle (µs), then field/value pairs as `take` returned them
-- Reply    the absolute expiry (µs), or nil when the session expired in between
local now, idle = clock(), tonumber(ARGV[2])
local key = KEYS[1]
if redis.call('EXISTS', key) == 1 then
  return redis.error_reply('RG_COLLISION session id collision')
end
local exp
for i = 3, #ARGV, 2 do
  if ARGV[i] == '$exp' then exp = tonumber(ARGV[i + 1]) end
end
if exp == nil or now >= exp then return false end
for i = 3, #ARGV, 2 do
  redis.call('HSET', key, ARGV[i], ARGV[i + 1])
end
touch(key, now, exp, idle)
return exp
