-- The prelude of every script of the crate (LuaScript::new puts it first): the clock, integer
-- division and the form numbers are written to Redis in. No script has its own.

-- Redis TIME in µs plus the caller's shift (ARGV[1]; 0 in production), or, when ARGV[1] is
-- `=<µs>`, a test's frozen clock (feature test-util) read instead of TIME. App servers' clocks
-- never enter a decision.
local function clock()
  local shift = ARGV[1]
  if string.byte(shift) == 61 then return tonumber(string.sub(shift, 2)) end
  local t = redis.call('TIME')
  -- Arithmetic converts TIME's digits with one strtod each (tonumber runs it twice), and a
  -- shift of 0, production's, is not converted at all: a script's clock is on every call.
  if shift == '0' then return t[1] * 1000000 + t[2] end
  return t[1] * 1000000 + t[2] + shift
end

-- Floor of a / b (b > 0), exact for integers below 2^53, the range every value the scripts
-- hold stays in (the Rust side validates quotas and lifetimes so): Lua 5.1 numbers are doubles,
-- and the checks step the rounded quotient onto the integer whose multiples bracket a.
local function idiv(a, b)
  local q = math.floor(a / b)
  if (q + 1) * b <= a then
    q = q + 1
  elseif q * b > a then
    q = q - 1
  end
  return q
end

-- Ceiling of a / b, as exact as idiv. `0 -`, not `-`: the ceiling of -1/1000 is 0, and Redis
-- refuses the `-0` that -idiv(1, 1000) would write as an expiry.
local function cdiv(a, b)
  return 0 - idiv(-a, b)
end

-- Integers as Redis stores them: digits, never `1e+15` (what tostring gives a large double)
-- nor `-0`; several are joined by ':', the form of the records that hold more than one.
local function fmt(n, ...)
  local s = string.format('%.0f', n + 0)
  if select('#', ...) == 0 then return s end
  return s .. ':' .. fmt(...)
end
