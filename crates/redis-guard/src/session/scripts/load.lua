-- Load sessions and mark them used, in one round trip: the coalesced form
-- (backend/coalesce.rs, `each_entry` in record.lua), one entry per request, decided in order.
-- Runs only for loads whose plain read (session/redis_load.rs) found the refresh due or the
-- record not as a touch leaves it.
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

local function load(key, at, args)
  local idle = number(ARGV[at])
  local fresh = args == 2 and number(ARGV[at + 1]) or idle / 100
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

return each_entry(load, function(args) return args == 1 or args == 2 end, '1 or 2 arguments')
