-- Load sessions and mark them used, in one round trip: the coalesced form
-- (backend/coalesce.rs), one entry per request, decided in order.
-- KEYS     one session hash per entry
-- ARGV     shift, the entry count, then per entry: 1 (its key count), 3 (its argument count),
--          its idle timeout (µs), how long a use stays fresh (µs), the client's address ('' to
--          record none)
-- Reply    per entry: the hash as a flat field/value array, or nil when there is no live session
--          (an expired one is deleted); a key Redis cannot read as a hash fails its own entry,
--          as the error's text, not the others
--
-- A session used again while its last use is fresh (by default within 1 % of its idle
-- timeout) is not marked again: most read-only requests then write nothing (no HSET, no
-- PEXPIRE, nothing to replicate), and the idle timeout still slides, counted from a use at most
-- that much earlier. The client's address is recorded with the mark, so it costs no write of
-- its own.
local now = clock()
local count = tonumber(ARGV[2]) or -1
if count ~= #KEYS or #ARGV ~= 2 + 5 * count then
  return redis.error_reply('RG_ARITY expected 1 key and 5 arguments per entry, got ' .. #KEYS
    .. ' keys and ' .. #ARGV .. ' arguments for ' .. tostring(ARGV[2]) .. ' entries')
end

local function load(key, idle, fresh, ip)
  local exp, seen = live(key, now, idle)
  if exp == nil then return false end
  if now - seen >= fresh then
    touch(key, now, exp, idle)
    if ip ~= '' then redis.call('HSET', key, '$ip', ip) end
  end
  return redis.call('HGETALL', key)
end

local out = {}
for e = 1, count do
  local at = 2 + 5 * (e - 1)
  local ok, reply = pcall(load, KEYS[e], tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]),
    ARGV[at + 5])
  if ok then
    out[e] = reply
  else
    out[e] = type(reply) == 'table' and reply.err or ('ERR ' .. tostring(reply))
  end
end
return out
