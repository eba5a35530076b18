-- Give back, charge or renew what one request holds under some rules, key by key: the refund
-- script (a Cluster's slots that admitted a request another slot denied, a response's leases
-- released, a cost settled lower), the charge script (a cost settled higher: whatever is left,
-- never denied) and the renewal script (a long response's leases pushed to a full expiry).
--
-- Built as prelude.lua, the algorithm files, then a table `each` mapping algorithm ids to the
-- script's function per algorithm (refund, charge, or concurrency's renewal; an algorithm
-- without one is skipped: custom algorithms charge nothing), then this file.
--
-- KEYS     the keys of the rules (on a Cluster, of one hash tag)
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production)
-- ARGV[2]  the request id (the sliding log and the leases name their entries with it)
-- ARGV[3]  the time the evaluation returned (µs), so a refund gives back only what that request
--          took, in the window it was counted in (`p.charged_at`), never quota of a later
--          window; a charge lands now and passes 0
-- ARGV     then 6 per key, as the evaluation's rules: algorithm id, limit, period (µs), burst,
--          emission interval (µs), cost (what to give back or add; 0: nothing)
-- Reply    how many keys were acted on (a renewal: how many leases were still held).
local now = clock()
if #ARGV ~= 3 + #KEYS * 6 then
  return redis.error_reply('RG_ARITY expected 3 + 6 arguments per key, got '
    .. #ARGV .. ' for ' .. #KEYS .. ' keys')
end
local charged_at = tonumber(ARGV[3])
if charged_at == nil then
  return redis.error_reply('RG_ARGUMENT a refund needs the evaluation time in ARGV[3]')
end
local done = 0
for i = 1, #KEYS do
  local p = params(3 + (i - 1) * 6, ARGV[2])
  p.charged_at = charged_at
  local f = each[p.id]
  if type(f) == 'function' and p.cost > 0 then
    local n = f(KEYS[i], now, p)
    done = done + (tonumber(n) or 1)
  end
end
return done
