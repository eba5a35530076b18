-- Live limits (limiter/live.rs), for evaluate.lua: a rule whose last argument starts with `L`
-- has its live record as one more key, after its state key and override key, and is decided
-- with the record's quota when one is set. The record's version and mode go back in the reply,
-- so that the limiter's copy (which the mode is taken from) follows a change from the next
-- decision on.

-- The spec without the mark, and whether it had it.
local function live_spec(spec)
  if string.byte(spec, 1) == 76 then return string.sub(spec, 2), true end
  return spec, false
end

-- The records this call has read, as { quota or false, version, mode code }.
local live_read = {}

-- A record's mode as the reply gives it: 0 none, 1 enforce, 2 shadow, 3 soft.
local live_modes = { enforce = 1, shadow = 2, soft = 3 }

-- Puts the quota of the live record at `lkey`,
-- "<version>[:<limit>:<period>:<burst>:<emission>][;<mode>]" (µs), in p's place when one is
-- set; returns the record's version (0: none) and mode code.
local function live_apply(p, lkey)
  local r = live_read[lkey]
  if r == nil then
    r = { false, 0, 0 }
    local v = redis.call('GET', lkey)
    if v then
      local l, per, b, e = string.match(v, '^%d+:(%d+):(%d+):(%d+):(%d+);?%a*$')
      l, per, b, e = tonumber(l), tonumber(per), tonumber(b), tonumber(e)
      if e and l >= 1 and per >= 1 and b >= 1 and e >= 1 then r[1] = { l, per, b, e } end
      r[2] = tonumber(string.match(v, '^(%d+)')) or 0
      r[3] = live_modes[string.match(v, ';(%a+)$') or ''] or 0
    end
    live_read[lkey] = r
  end
  local q = r[1]
  if q then p.limit, p.period, p.burst, p.emission = q[1], q[2], q[3], q[4] end
  return r[2], r[3]
end
