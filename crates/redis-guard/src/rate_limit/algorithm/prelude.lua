-- Shared helpers of the general rate-limit script (after backend/prelude.lua).

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

-- The parameters of the rule whose 6 arguments follow ARGV[o], as the algorithms take them;
-- `req` is the request id.
local function params(o, req)
  return {
    id = tonumber(ARGV[o + 1]),
    limit = tonumber(ARGV[o + 2]),
    period = tonumber(ARGV[o + 3]),
    burst = tonumber(ARGV[o + 4]),
    emission = tonumber(ARGV[o + 5]),
    cost = tonumber(ARGV[o + 6]),
    req = req,
  }
end
