-- Decide and record one request against rules that are all GCRA (the default algorithm), all or
-- nothing: the same decisions as evaluate.lua with gcra.lua, written inline, because this is the
-- script almost every request runs. It defines no function but the two divisions and builds no
-- table but the reply, so a call costs a fraction of the general dispatcher (see
-- docs/benchmarks.md).
--
-- KEYS, ARGV, clock and reply: exactly as evaluate.lua (the algorithm id of every rule is 1, and
-- the emission interval ARGV drives everything; the period is not read). Built as division.lua,
-- then this file.
local n = #KEYS
if #ARGV ~= 3 + n * 6 then
  return redis.error_reply('RG_ARITY expected 3 + 6 arguments per key, got '
    .. #ARGV .. ' for ' .. n .. ' keys')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
-- reply[5i-4 .. 5i] is rule i's row; while deciding, reply[5i-2] holds an admitted rule's new
-- TAT until the commit below replaces it with the remaining count.
local reply, admitted = {}, true
for i = 1, n do
  local o, r = 3 + (i - 1) * 6, (i - 1) * 5
  local b, e, c = tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), tonumber(ARGV[o + 6])
  local tat = tonumber(redis.call('GET', KEYS[i]))
  if tat == nil or tat < now then tat = now end
  local new_tat = tat + c * e
  local allow_at = new_tat - b * e
  reply[r + 2] = tonumber(ARGV[o + 2])
  if now < allow_at then
    admitted = false
    local remaining = idiv(now + b * e - tat, e)
    if remaining < 0 then remaining = 0 end
    reply[r + 1], reply[r + 3] = 0, remaining
    reply[r + 4], reply[r + 5] = cdiv(allow_at - now, 1000), cdiv(tat - now, 1000)
  else
    reply[r + 1], reply[r + 3] = 1, idiv(now - allow_at, e)
    reply[r + 4], reply[r + 5] = new_tat, cdiv(new_tat - now, 1000)
  end
end
for i = 1, n do
  local r = (i - 1) * 5
  if reply[r + 1] == 1 then
    local new_tat = reply[r + 4]
    if admitted and ARGV[3] ~= '1' then
      redis.call('SET', KEYS[i], string.format('%.0f', new_tat), 'PX', cdiv(new_tat - now, 1000))
    end
    reply[r + 4] = 0
  end
end
reply[n * 5 + 1] = now
return reply
