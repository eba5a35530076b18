-- Write a session's changed fields, in one round trip. Never re-creates a session that is gone.
-- KEYS[1]  the session hash
-- ARGV     shift, idle (µs), max lifetime (µs), mode ('create' or 'update'), clear (1: delete
--          every user field first), n (fields to set), then n field/value pairs, then the fields
--          to delete
-- Reply    the absolute expiry (µs), or nil when an update finds no live session (destroyed,
--          revoked or expired meanwhile: the write is dropped, nothing is re-created) or the
--          write gives the session an absolute lifetime that has already passed (it ends)
local now, idle, max = clock(), tonumber(ARGV[2]), tonumber(ARGV[3])
local mode, clear, n = ARGV[4], ARGV[5] == '1', tonumber(ARGV[6])
local key = KEYS[1]
local exp
if mode == 'create' then
  if redis.call('EXISTS', key) == 1 then
    return redis.error_reply('RG_COLLISION session id collision')
  end
  exp = now + max
  redis.call('HSET', key, '$created', fmt(now), '$exp', fmt(exp))
else
  exp = live(key, now, idle)
  if exp == nil then return false end
end
if clear then
  local fields = redis.call('HKEYS', key)
  for _, f in ipairs(fields) do
    if string.sub(f, 1, 1) ~= '$' then redis.call('HDEL', key, f) end
  end
end
local i = 7
local relife = false
for _ = 1, n do
  local field = ARGV[i]
  redis.call('HSET', key, field, ARGV[i + 1])
  if field == '$max' or field == '$idle' then relife = true end
  i = i + 2
end
while i <= #ARGV do
  redis.call('HDEL', key, ARGV[i])
  i = i + 1
end
if relife then
  -- This session's own lifetimes (set_max_lifetime, set_idle_timeout) take over from now.
  local m = redis.call('HMGET', key, '$created', '$max', '$idle')
  local created, own_max, own = tonumber(m[1]), tonumber(m[2]), tonumber(m[3])
  if created and own_max then
    exp = created + own_max
    redis.call('HSET', key, '$exp', fmt(exp))
    if now >= exp then
      redis.call('DEL', key)
      return false
    end
  end
  if own then own_idle[key] = own end
end
touch(key, now, exp, idle)
return exp
