-- Renew the leases one request holds (a long response still streaming), so that they outlive
-- their first expiry while the request is alive.
--
-- Built as backend/prelude.lua, prelude.lua, concurrency.lua, then this file.
--
-- KEYS      the lease keys of the request (concurrency rules; on a Cluster, of one hash tag)
-- ARGV[1]   a time shift in µs added to Redis TIME (0 in production)
-- ARGV[2]   the request id the leases are named by
-- ARGV[3]   unused (the refund script's evaluation time; kept so both take the same arguments)
-- ARGV      then 6 per key, as the refund script: algorithm id, limit, period (the lease
--           expiry, µs), burst, emission interval, cost
-- Reply     how many of the leases were still held and are renewed.
local now = clock()
local bad_arity = check_arity()
if bad_arity then return bad_arity end
local renewed = 0
for i = 1, #KEYS do
  renewed = renewed + concurrency_renew(KEYS[i], now, params(3 + (i - 1) * 6, ARGV[2]))
end
return renewed
