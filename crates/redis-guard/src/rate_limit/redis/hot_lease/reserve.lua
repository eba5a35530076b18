-- Reserves a block of up to `k` units of a leased GCRA rule for one replica (Rule::leased):
-- the TAT moves by g emission intervals at once, g = min(k, what fits in the burst now), as g
-- requests admitted one after the other would move it. Nothing is reserved unless the request
-- that asks (cost c) fits: then the reply is the denial gcra_plain.lua would give.
--
-- KEYS[1]  the rule's GCRA state ("<TAT>" or "<TAT>:<emission>", both scripts' forms)
-- KEYS[2]  the key's open-block count: units reserved by blocks not yet given back (any replica)
-- ARGV[1]  the clock's shift (backend/prelude.lua)
-- ARGV     then burst, emission interval (µs), cost c, block size k (k >= c; 0: only give the
--          block back), the count's TTL (ms), then the replica's previous block of the key to
--          give back first (g, u, floor, time, as give_back() takes them; g = 0: none): a spent
--          block costs no call of its own
-- Reply    { g, remaining, retry_after_us, reset_after_us, now, floor }: g = 0 for a denial;
--          remaining what Redis has left after the block; reset_after_us the TAT after it
--          less now; floor = TAT - open units × emission after the reservation, what
--          give_back() needs to know the block is still whole (see returns.lua)
-- Built as backend/prelude.lua, returns.lua, then this file.
local now = clock()
local b, em = tonumber(ARGV[2]), tonumber(ARGV[3])
local c, k, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local pg = tonumber(ARGV[7])
if pg > 0 then
  give_back(KEYS[1], KEYS[2], now, em, pg, tonumber(ARGV[8]), tonumber(ARGV[9]),
    tonumber(ARGV[10]), ttl)
end
if k == 0 then return 0 end
local tat = lease_tat(redis.call('GET', KEYS[1]))
if not tat or tat < now then tat = now end
local fits = idiv(now + b * em - tat, em)
if fits < c then
  if fits < 0 then fits = 0 end
  return { 0, fits, tat + c * em - b * em - now, tat - now, now, 0 }
end
local g = math.min(k, fits)
local new_tat = tat + g * em
redis.call('SET', KEYS[1], fmt(new_tat), 'PX', cdiv(new_tat - now, 1000))
local open = (tonumber(redis.call('GET', KEYS[2])) or 0) + g
redis.call('SET', KEYS[2], fmt(open), 'PX', ttl)
return { g, fits - g, 0, new_tat - now, now, new_tat - open * em }
