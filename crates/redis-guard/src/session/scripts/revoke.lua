-- Take a user's index: read and delete it in one step, so a session indexed concurrently is
-- either in what this returns (and ended by the caller) or in the next index.
-- KEYS[1]  the user's index
-- ARGV     shift
-- Reply    every member (bounded by the per-user cap)
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1])
return members
