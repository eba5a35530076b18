-- Remove entries from a user's index, then enforce the cap.
-- KEYS[1]  the user's index
-- ARGV     shift, (unused), cap (0: no cap), keep (a member never popped, or ''), then the
--          members to remove (sessions that are gone)
-- Reply    the members popped by the cap, soonest expiry first: the caller ends those sessions
local now = clock()
local key, cap, keep = KEYS[1], tonumber(ARGV[3]), ARGV[4]
for i = 5, #ARGV do redis.call('ZREM', key, ARGV[i]) end
local popped = {}
if cap > 0 then
  local extra = redis.call('ZCARD', key) - cap
  if extra > 0 then
    for _, m in ipairs(redis.call('ZRANGE', key, 0, extra)) do
      if m ~= keep and #popped < extra then
        redis.call('ZREM', key, m)
        popped[#popped + 1] = m
      end
    end
  end
end
keep_index(key, now)
return popped
