-- Whether a session is live, without marking it used (an expired one is deleted).
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs)
-- Reply    1 when live, else 0
local now, idle = clock(), tonumber(ARGV[2])
if live(KEYS[1], now, idle) then return 1 end
return 0
