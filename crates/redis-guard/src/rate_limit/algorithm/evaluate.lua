-- Decide and record one request against every rule of a layer, all or nothing.
--
-- The algorithm functions (gcra.lua, ...) are prepended to this file when the script is built.
--
-- KEYS[i]  the state key of rule i (i = 1..n); keys of one call share a hash tag.
-- ARGV     6 integers per rule, in KEYS order:
--            algorithm id (1 = GCRA), limit, period (µs), burst, emission interval (µs), cost
-- Clock    Redis TIME, in microseconds; the caller's clock never enters a decision.
-- Reply    n arrays, one per rule, in KEYS order:
--            { allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms }
--          Milliseconds are rounded up. When any rule denies, nothing is recorded for any rule.
local algorithms = { [1] = gcra }

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local n = #KEYS
if #ARGV ~= n * 6 then
  return redis.error_reply('redis-guard: expected 6 arguments per key, got ' .. #ARGV .. ' for ' .. n .. ' keys')
end

local replies, commits, all_allowed = {}, {}, true
for i = 1, n do
  local o = (i - 1) * 6
  local algorithm = algorithms[tonumber(ARGV[o + 1])]
  if algorithm == nil then
    return redis.error_reply('redis-guard: unknown algorithm id ' .. tostring(ARGV[o + 1]))
  end
  local p = {
    limit = tonumber(ARGV[o + 2]),
    period = tonumber(ARGV[o + 3]),
    burst = tonumber(ARGV[o + 4]),
    emission = tonumber(ARGV[o + 5]),
    cost = tonumber(ARGV[o + 6]),
  }
  local allowed, remaining, retry_us, reset_us, commit = algorithm(KEYS[i], now, p)
  if allowed then
    commits[#commits + 1] = commit
  else
    all_allowed = false
  end
  replies[i] = {
    allowed and 1 or 0, p.limit, remaining, math.ceil(retry_us / 1000), math.ceil(reset_us / 1000),
  }
end

if all_allowed then
  for _, commit in ipairs(commits) do commit() end
end
return replies
