-- Record a session under its user, for "log out everywhere" and listing.
-- KEYS[1]  the user's index: a sorted set of session storage keys scored by absolute expiry
-- ARGV     shift, (unused), member (the session's storage key), its expiry (µs), the cap
-- Reply    {} when the index is within the cap; otherwise every other member (at most cap, as
--          the index was within it before): the caller checks which are still live and calls
--          `trim` with the dead ones, so dead entries never push out a live session
local now = clock()
local key, member, exp, cap = KEYS[1], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
redis.call('ZADD', key, fmt(exp), member)
keep_index(key, now)
if redis.call('ZCARD', key) <= cap then return {} end
local others = {}
for _, m in ipairs(redis.call('ZRANGE', key, 0, cap)) do
  if m ~= member then others[#others + 1] = m end
end
return others
