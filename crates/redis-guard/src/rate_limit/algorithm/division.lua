-- Exact integer division for the rate-limit scripts (every script starts with this file). Lua 5.1
-- numbers are doubles: every value here is an integer below 2^53 (the Rust side validates quotas
-- so), and `idiv` floors a quotient exactly where `math.floor(a / b)` could be off by one after
-- rounding.
local function idiv(a, b)
  local q = math.floor(a / b)
  if (q + 1) * b <= a then
    q = q + 1
  elseif q * b > a then
    q = q - 1
  end
  return q
end

-- Ceiling of a / b, exactly.
local function cdiv(a, b)
  return -idiv(-a, b)
end

