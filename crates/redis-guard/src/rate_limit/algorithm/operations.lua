-- Operations on one rule's record for one key (rate_limit/limiter/operations.rs).
-- Built as backend/prelude.lua, overrides.lua, then this file.
--
-- KEYS     1: the rule's state key, 2: its override key (same hash tag)
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production)
-- ARGV[2]  `get` (read), `reset` (delete state and record), `penalize` (blocked for ARGV[3] µs,
--          off the runtime allow list) or `allow` (on the runtime allow list for ARGV[3] µs, no
--          longer blocked)
-- ARGV[3]  the duration in µs (penalize, allow)
-- Reply    { now, block_until, allow_until, level, level_until, strikes, strikes_until }: the
--          record after the operation (zeros: none), µs of Redis time (+ shift).
local now = clock()
local op = ARGV[2]
local r = ov_parse(redis.call('GET', KEYS[2]), now)
if op == 'reset' then
  redis.call('DEL', KEYS[1], KEYS[2])
  r = false
elseif op == 'penalize' or op == 'allow' then
  local d = tonumber(ARGV[3])
  if d == nil or d < 1 then
    return redis.error_reply('RG_ARGUMENT a duration in µs is needed, got ' .. tostring(ARGV[3]))
  end
  if not r then r = { b = 0, a = 0, l = 0, lu = 0, s = 0, su = 0 } end
  if op == 'penalize' then r.b, r.a = now + d, 0 else r.a, r.b = now + d, 0 end
  ov_write(KEYS[2], r, now)
elseif op ~= 'get' then
  return redis.error_reply('RG_ARGUMENT unknown operation ' .. tostring(op))
end
if not r then return { now, 0, 0, 0, 0, 0, 0 } end
return { now, r.b, r.a, r.l, r.lu, r.s, r.su }
