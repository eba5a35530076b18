-- Rotation, step 4 of 4 (after `restore`): drop the old id from the user's index and confirm
-- the new one is still there. 0 means a revocation took the index after step 2: the caller
-- deletes the restored session.
-- KEYS[1]  the user's index
-- ARGV     shift, (unused), old member, new member
-- Reply    1 when the new member is indexed, else 0
local now = clock()
redis.call('ZREM', KEYS[1], ARGV[3])
keep_index(KEYS[1], now)
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then return 1 end
return 0
