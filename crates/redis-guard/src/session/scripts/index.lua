-- Record a session under its user, for "log out everywhere" and listing.
-- KEYS[1]  the user's index: a sorted set of session storage keys scored by absolute expiry
-- ARGV     shift, (unused), member (the session's storage key), its expiry (µs), the cap
-- Reply    the members pushed out by the cap (oldest expiry first): the caller ends those
--          sessions, so the index never loses track of a live session
local now = clock()
local key, member, exp, cap = KEYS[1], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
redis.call('ZADD', key, fmt(exp), member)
local popped = {}
local extra = redis.call('ZCARD', key) - cap
if extra > 0 then
  local out = redis.call('ZPOPMIN', key, extra)
  for i = 1, #out, 2 do popped[#popped + 1] = out[i] end
end
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIRE', key, math.max(1, cdiv(tonumber(last[2]) - now, 1000))) end
return popped
