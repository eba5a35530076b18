-- A session's metadata for a listing, without marking it used (an expired one is deleted).
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs)
-- Reply    nil when there is no live session; else the store time (µs), then the values of
--          $exp, $created, $seen and $dev ('' for each one absent)
local now, idle = clock(), tonumber(ARGV[2])
if not live(KEYS[1], now, idle) then return false end
local m = redis.call('HMGET', KEYS[1], '$exp', '$created', '$seen', '$dev')
local out = { fmt(now) }
for i = 1, 4 do out[i + 1] = m[i] or '' end
return out
