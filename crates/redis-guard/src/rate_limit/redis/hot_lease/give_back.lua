-- Gives back a block's unused units when its lease ends (returns.lua says when that is exact).
--
-- KEYS[1]  the rule's GCRA state; KEYS[2] the open-block count
-- ARGV[1]  the clock's shift (backend/clock.lua)
-- ARGV     then emission interval (µs), g (the block), u (unused, u <= g), the reservation's
--          floor and time (µs), the count's TTL (ms)
-- Reply    the units given back
-- Built as backend/clock.lua, division.lua, returns.lua, then this file.
local a = {}
for i = 2, 7 do a[i] = tonumber(ARGV[i]) end
return give_back(KEYS[1], KEYS[2], clock(), a[2], a[3], a[4], a[5], a[6], a[7])
