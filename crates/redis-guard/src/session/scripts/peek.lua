-- A session's metadata for a listing, without marking it used (an expired one is deleted).
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs)
-- Reply    nil when there is no live session; else the store time (µs), then the values of
--          the absolute expiry, the creation time, the last use and the device ('' for each one
--          absent)
local now, idle = clock(), tonumber(ARGV[2])
if not live(KEYS[1], now, idle) then return false end
local r = meta[KEYS[1]]
return { fmt(now), fmt(r.exp), r.created and fmt(r.created) or '', fmt(r.seen), r.dev }
