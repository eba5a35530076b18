-- Load sessions and mark them used, in one round trip: the coalesced form
-- (backend/coalesce.rs), one entry per request, decided in order.
-- KEYS     one session hash per entry
-- ARGV     shift, the entry count, then per entry: 1 (its key count), its argument count (1 or
--          2), its idle timeout (µs), and, when it is not 1 % of the idle timeout, how long a
--          use stays fresh (µs)
-- Reply    per entry: the hash as a flat field/value array, with one element more at the end
--          ('1', an odd length) when this load marked the session used, or nil when there is no
--          live session (an expired one is deleted); a key Redis cannot read as a hash fails
--          its own entry, as the error's text, not the others
--
-- A session used again while its last use is fresh (by default within 1 % of its idle
-- timeout) is not marked again: most read-only requests then write nothing (no HSET, no
-- PEXPIRE, nothing to replicate), and the idle timeout still slides, counted from a use at most
-- that much earlier.
local now = clock()
local count = tonumber(ARGV[2]) or -1

local function load(key, idle, fresh)
  local exp, seen = live(key, now, idle)
  if exp == nil then return false end
  if now - seen < fresh then return redis.call('HGETALL', key) end
  touch(key, now, exp, idle)
  -- Marked: the layer then records the client's device if it changed (a write of its own,
  -- at most once per interval), so a load within the interval stays one read.
  local all = redis.call('HGETALL', key)
  all[#all + 1] = '1'
  return all
end

local function arity(got)
  return redis.error_reply('RG_ARITY expected 1 key and 1 or 2 arguments per entry, got '
    .. got .. ' for ' .. tostring(ARGV[2]) .. ' entries')
end

if count ~= #KEYS then return arity(#KEYS .. ' keys') end
local out = {}
local at = 3
for e = 1, count do
  local args = tonumber(ARGV[at + 1])
  if ARGV[at] ~= '1' or (args ~= 1 and args ~= 2) or at + 1 + args > #ARGV then
    return arity(#ARGV .. ' arguments')
  end
  local idle = tonumber(ARGV[at + 2])
  local fresh = args == 2 and tonumber(ARGV[at + 3]) or idle / 100
  local ok, reply = pcall(load, KEYS[e], idle, fresh)
  if ok then
    out[e] = reply
  else
    out[e] = type(reply) == 'table' and reply.err or ('ERR ' .. tostring(reply))
  end
  at = at + 2 + args
end
if at - 1 ~= #ARGV then return arity(#ARGV .. ' arguments') end
return out
