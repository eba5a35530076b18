-- Decide and record one request against every rule of a layer, all or nothing.
--
-- Built by concatenation: prelude.lua, the algorithm files, a table `algorithms` mapping ids to
-- their functions, then this file.
--
-- KEYS[i]  the state key of rule i (i = 1..n); on a Redis Cluster all keys of one call share a
--          hash tag.
-- ARGV[1]  a time shift in µs added to Redis TIME: 0 in production; tests move time forward
--          with it instead of sleeping.
-- ARGV[2]  a request id, unique per evaluation (the sliding log names its members with it).
-- ARGV[3]  1 for a dry run: decide, record nothing (used on a Cluster for the rules after one
--          that denied), else 0.
-- ARGV     then 6 integers per rule, in KEYS order:
--            algorithm id, limit, period (µs), burst, emission interval (µs), cost
-- Clock    Redis TIME (+ shift), in microseconds; the caller's clock never enters a decision.
-- Reply    n arrays, one per rule, in KEYS order:
--            { allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms }
--          Milliseconds are rounded up. When any rule denies, nothing is recorded for any rule.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])

local n = #KEYS
if #ARGV ~= 3 + n * 6 then
  return redis.error_reply('redis-guard: expected 3 + 6 arguments per key, got ' .. #ARGV .. ' for ' .. n .. ' keys')
end
local req, dry = ARGV[2], ARGV[3] == '1'

local replies, commits, all_allowed = {}, {}, true
for i = 1, n do
  local o = 3 + (i - 1) * 6
  local id = tonumber(ARGV[o + 1])
  local algorithm = algorithms[id]
  if algorithm == nil then
    return redis.error_reply('redis-guard: unknown algorithm id ' .. tostring(ARGV[o + 1]))
  end
  local p = {
    limit = tonumber(ARGV[o + 2]),
    period = tonumber(ARGV[o + 3]),
    burst = tonumber(ARGV[o + 4]),
    emission = tonumber(ARGV[o + 5]),
    cost = tonumber(ARGV[o + 6]),
    req = req,
  }
  local allowed, remaining, retry_us, reset_us, commit = algorithm(KEYS[i], now, p)
  local bad = check_reply(allowed, remaining, retry_us, reset_us, commit)
  if bad then
    return redis.error_reply('redis-guard: algorithm ' .. (names[id] or tostring(id)) .. ' ' .. bad)
  end
  if allowed then
    commits[#commits + 1] = commit
  else
    all_allowed = false
  end
  replies[i] = { allowed and 1 or 0, p.limit, remaining, cdiv(retry_us, 1000), cdiv(reset_us, 1000) }
end

if all_allowed and not dry then
  for _, commit in ipairs(commits) do commit() end
end
return replies
