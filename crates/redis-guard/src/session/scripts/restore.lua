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
local fields = {}
for i = 3, #ARGV, 2 do fields[ARGV[i]] = ARGV[i + 1] end
-- `$m` and `$dev`, or a session stored in an earlier layout (`touch` rewrites it).
local r = unpack_meta(fields['$m'], fields['$created'], fields['$exp'], fields['$seen'],
  fields['$dev'])
local exp = r.exp
if exp == nil or now >= exp then return false end
for i = 3, #ARGV, 2 do
  redis.call('HSET', key, ARGV[i], ARGV[i + 1])
end
meta[key] = r
touch(key, now, exp, idle)
return exp
