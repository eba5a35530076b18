-- A user's sessions, pruned of expired entries.
-- KEYS[1]  the user's index
-- ARGV     shift
-- Reply    flat member/expiry array, soonest expiry first; expiry as µs from now
local now = clock()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
local out = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 2, #out, 2 do out[i] = tonumber(out[i]) - now end
return out
