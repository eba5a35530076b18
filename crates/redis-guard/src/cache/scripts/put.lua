-- Writes a cache key: an entry or a hit-for-pass marker, with its times in front of the blob
-- (see cache/entry.rs) and a TTL. Overwrites whatever the key held, of any type; with ARGV[8]
-- `NX`, only a key that holds nothing (the value cache's `add`).
--
-- KEYS[1]  the entry's key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- ARGV[2]  `E` (entry) or `P` (hit-for-pass)
-- ARGV[3]  when the request that computed it read the key, µs on the shifted clock (a time
--          past now is now: a value written without a read)
-- ARGV[4]  how long it stays fresh from now, µs (jitter included)
-- ARGV[5]  how long it may be served stale after that, µs
-- ARGV[6]  the blob
-- ARGV[7]  how long past its freshness the key is kept at least, µs (stale-if-error)
-- ARGV[8]  optional: `NX`
-- Reply    now, µs; nil when `NX` found the key taken
local now = clock()
local started = math.min(tonumber(ARGV[3]), now)
local fresh, stale = tonumber(ARGV[4]), tonumber(ARGV[5])
local delta = math.max(0, now - started)
local line = table.concat({ 'RGC1', ARGV[2], fmt(now + fresh), fmt(now + fresh + stale),
  fmt(started), fmt(delta) }, ' ') .. '\n'
local px = math.max(1, cdiv(fresh + math.max(stale, tonumber(ARGV[7])), 1000))
if ARGV[8] == 'NX' then
  if not redis.call('SET', KEYS[1], line .. ARGV[6], 'PX', px, 'NX') then
    return false
  end
else
  redis.call('SET', KEYS[1], line .. ARGV[6], 'PX', px)
end
return fmt(now)
