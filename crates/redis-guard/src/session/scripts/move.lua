-- Rotation, step 2 of 4 (after `take`): index the new id next to the old one, in the user's
-- slot. Refused when the old id has left the index (revoked, or pushed out by the cap): the
-- rotation then ends the session instead of restoring it.
-- KEYS[1]  the user's index
-- ARGV     shift, (unused), old member, new member
-- Reply    1 when indexed, 0 when refused
local now = clock()
local score = redis.call('ZSCORE', KEYS[1], ARGV[3])
if not score then return 0 end
redis.call('ZADD', KEYS[1], score, ARGV[4])
keep_index(KEYS[1], now)
return 1
