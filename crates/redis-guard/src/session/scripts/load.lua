-- Load sessions and mark them used, in one round trip: the coalesced form
-- (backend/coalesce.rs), one entry per request, decided in order.
-- KEYS     one session hash per entry
-- ARGV     shift, the entry count, then per entry: 1 (its key count), 1 (its argument count),
--          its idle timeout (µs)
-- Reply    per entry: the hash as a flat field/value array, or nil when there is no live session
--          (an expired one is deleted); a key Redis cannot read as a hash fails its own entry,
--          as the error's text, not the others
--
-- A session used again within 1 % of its idle timeout is not marked again: most read-only
-- requests then write nothing (no HSET, no PEXPIRE, nothing to replicate), and the idle timeout
-- still slides, counted from a use at most 1 % of it earlier.
local now = clock()
local count = tonumber(ARGV[2]) or -1
if count ~= #KEYS or #ARGV ~= 2 + 3 * count then
  return redis.error_reply('RG_ARITY expected 1 key and 3 arguments per entry, got ' .. #KEYS
    .. ' keys and ' .. #ARGV .. ' arguments for ' .. tostring(ARGV[2]) .. ' entries')
end

local function load(key, idle)
  local exp, seen = live(key, now, idle)
  if exp == nil then return false end
  if now - seen >= idle / 100 then
    touch(key, now, exp, idle)
  end
  return redis.call('HGETALL', key)
end

local out = {}
for e = 1, count do
  local ok, reply = pcall(load, KEYS[e], tonumber(ARGV[2 + 3 * e]))
  if ok then
    out[e] = reply
  else
    out[e] = type(reply) == 'table' and reply.err or ('ERR ' .. tostring(reply))
  end
end
return out
