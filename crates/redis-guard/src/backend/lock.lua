-- A lock (a lease) on one key: acquire, extend or release it with a holder's token.
--
-- KEYS[1]  the lock's key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- ARGV[2]  `acquire`, `extend` or `release`
-- ARGV[3]  the holder's token (random, unique per acquisition)
-- ARGV[4]  the lease in ms (acquire, extend)
-- State    "<token>:<deadline µs>", expiring with the lease (PX). The deadline on the shifted
--          clock decides whether the lock is held, so a lease runs out in tests without waiting;
--          in production it falls when the key expires.
-- Reply    1 when the operation took effect (acquired; extended or released by its holder), 0
--          when not (held by another; not held by this token any more). A key holding something
--          that is not a lock is an error, never overwritten.
local now = clock()
local op, token, lease = ARGV[2], ARGV[3], tonumber(ARGV[4])
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return redis.error_reply('RG_LOCK the lock key holds another type: ' .. v.err)
end
local holder, deadline = nil, 0
if v then
  holder, deadline = string.match(v, '^(.*):(%d+)$')
  if holder == nil then
    return redis.error_reply('RG_LOCK the lock key holds a value that is not a lock')
  end
  deadline = tonumber(deadline)
end
local held = holder ~= nil and deadline > now
local function take()
  redis.call('SET', KEYS[1], token .. ':' .. fmt(now + lease * 1000), 'PX', lease)
  return 1
end
if op == 'acquire' then
  if held then return 0 end
  return take()
elseif op == 'extend' then
  if not held or holder ~= token then return 0 end
  return take()
elseif op == 'release' then
  if holder ~= token then return 0 end
  redis.call('DEL', KEYS[1])
  if held then return 1 end
  return 0
end
return redis.error_reply('RG_ARGUMENT unknown lock operation ' .. tostring(op))
