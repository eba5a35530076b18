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
-- Reply    one flat array: five integers per rule, in KEYS order,
--            allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms,
--          then the time of the decision (Redis TIME + shift, µs), which a refund passes back.
--          Milliseconds are rounded up. When any rule denies, nothing is recorded for any rule.
local now = clock()
local bad_arity = check_arity()
if bad_arity then return bad_arity end
local n, dry = #KEYS, ARGV[3] == '1'

local replies, commits, all_allowed = {}, {}, true
for i = 1, n do
  local p = params(i)
  local algorithm = algorithms[p.id]
  if type(algorithm) ~= 'function' then
    if names[p.id] then
      return redis.error_reply('RG_ALGORITHM custom algorithm ' .. names[p.id]
        .. ' is not a function: its source must `return function(key, now, p) ... end`')
    end
    return redis.error_reply('RG_ALGORITHM unknown algorithm id ' .. tostring(p.id))
  end
  local allowed, remaining, retry_us, reset_us, commit = algorithm(KEYS[i], now, p)
  local bad = check_reply(allowed, remaining, retry_us, reset_us, commit)
  if bad then
    return redis.error_reply('RG_ALGORITHM algorithm ' .. (names[p.id] or tostring(p.id)) .. ' ' .. bad)
  end
  if allowed then
    commits[#commits + 1] = commit
  else
    all_allowed = false
  end
  local r = (i - 1) * 5
  replies[r + 1], replies[r + 2], replies[r + 3] = allowed and 1 or 0, p.limit, remaining
  replies[r + 4], replies[r + 5] = cdiv(retry_us, 1000), cdiv(reset_us, 1000)
end

if all_allowed and not dry then
  for _, commit in ipairs(commits) do commit() end
end
replies[n * 5 + 1] = now
return replies
