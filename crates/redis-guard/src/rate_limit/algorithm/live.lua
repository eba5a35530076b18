-- Live limits (limiter/live.rs), for evaluate.lua: a rule whose last argument starts with `L`
-- has its live record as one more key, after its state key and override key, and is decided
-- with the record's quota when one is set.

-- The spec without the mark, and whether it had it.
local function live_spec(spec)
  if string.byte(spec, 1) == 76 then return string.sub(spec, 2), true end
  return spec, false
end

-- The records this call has read: false for none (or cleared: its version alone).
local live_read = {}

-- Puts the quota of the live record at `lkey`, "<version>:<limit>:<period>:<burst>:<emission>"
-- (µs), in p's place when one is set. The record's mode (";<mode>" after it) is not read here:
-- it decides how the rules are split into calls, from the limiter's copy.
local function live_apply(p, lkey)
  local q = live_read[lkey]
  if q == nil then
    q = false
    local v = redis.call('GET', lkey)
    if v then
      local l, per, b, e = string.match(v, '^%d+:(%d+):(%d+):(%d+):(%d+);?%a*$')
      l, per, b, e = tonumber(l), tonumber(per), tonumber(b), tonumber(e)
      if e and l >= 1 and per >= 1 and b >= 1 and e >= 1 then q = { l, per, b, e } end
    end
    live_read[lkey] = q
  end
  if q then p.limit, p.period, p.burst, p.emission = q[1], q[2], q[3], q[4] end
end
