-- Live limits (limiter/live.rs), for evaluate.lua: a rule whose last argument starts with `L`
-- has its live record as one more key, after its state key and override key, and is decided
-- with the record's quota when one is set. The record's version, mode and quota go back in the
-- reply: the decision's headers name the quota it was made with, and the limiter's copy (which
-- the mode is taken from) follows a change from the next decision on.

-- The spec without the mark, and whether it had it.
local function live_spec(spec)
  if string.byte(spec, 1) == 76 then return string.sub(spec, 2), true end
  return spec, false
end

-- The records this call has read, as { version, mode code, limit, period, burst, emission }
-- (a quota of zeros: none).
local live_read = {}

-- A record's mode as the reply gives it: 0 none, 1 enforce, 2 shadow, 3 soft.
local live_modes = { enforce = 1, shadow = 2, soft = 3 }

-- `s` as an integer when it is one from 1 (0 with `zero`) to `max`, else nil: a record written
-- by hand may hold any digits, and a number past 2^53 has no exact Lua value.
local function live_int(s, max, zero)
  local n = tonumber(s)
  if n and n <= max and (n >= 1 or (zero and n == 0)) then return n end
  return nil
end

-- Puts the quota of the live record at `lkey`,
-- "<version>[:<limit>:<period>:<burst>:<emission>][;<mode>]" (µs), in p's place when one is
-- set; returns the record as live_read keeps it (version 0: none).
local function live_apply(p, lkey)
  local r = live_read[lkey]
  if r == nil then
    r = { 0, 0, 0, 0, 0, 0 }
    local v = redis.call('GET', lkey)
    -- A version past 2^53 is no version: the record is no record.
    local version = v and live_int(string.match(v, '^(%d+)'), 9007199254740991, true)
    if version then
      local l, per, b, e = string.match(v, '^%d+:(%d+):(%d+):(%d+):(%d+);?%a*$')
      -- As a quota can be set (limit.rs): limit and burst fit a u32, times fit 2^53 µs.
      l, b = live_int(l, 4294967295), live_int(b, 4294967295)
      per, e = live_int(per, 9007199254740991), live_int(e, 9007199254740991)
      if l and per and b and e then r[3], r[4], r[5], r[6] = l, per, b, e end
      r[1] = version
      r[2] = live_modes[string.match(v, ';(%a+)$') or ''] or 0
    end
    live_read[lkey] = r
  end
  if r[3] > 0 then p.limit, p.period, p.burst, p.emission = r[3], r[4], r[5], r[6] end
  return r
end
