-- The clock of every script, prepended to each: Redis TIME in µs plus the caller's shift
-- (ARGV[1]; 0 in production), or, when ARGV[1] is `=<µs>`, a test's frozen clock (feature
-- test-util) read instead of TIME. App servers' clocks never enter a decision.
local function clock()
  if string.byte(ARGV[1]) == 61 then return tonumber(string.sub(ARGV[1], 2)) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
end
