-- Shared helpers of the rate-limit script. Lua 5.1 numbers are doubles: every value here is an
-- integer below 2^53 (the Rust side validates quotas so), and `idiv` floors a quotient exactly
-- where `math.floor(a / b)` could be off by one after rounding.
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

-- Checks what an algorithm returned against the contract; returns a description of the first
-- problem, or nil.
local function check_reply(allowed, remaining, retry_us, reset_us, commit)
  if type(allowed) ~= 'boolean' then
    return 'must return a boolean first (allowed), got ' .. type(allowed)
  end
  local fields = { remaining = remaining, retry_after_us = retry_us, reset_after_us = reset_us }
  for name, v in pairs(fields) do
    if type(v) ~= 'number' or v < 0 or v ~= math.floor(v) or v >= 2 ^ 53 then
      return 'returned ' .. name .. ' = ' .. tostring(v) .. '; expected a non-negative integer'
    end
  end
  if allowed and type(commit) ~= 'function' then
    return 'admitted a request without returning a commit function'
  end
  if not allowed and retry_us < 1 then
    return 'denied a request with retry_after_us = 0; expected at least 1'
  end
  return nil
end
