-- Writes a cache key: an entry or a hit-for-pass marker, with its times in front of the blob
-- (see cache/entry.rs) and a TTL. Overwrites whatever the key held, of any type; with ARGV[8]
-- `NX`, only a key that holds nothing (the value cache's `add`).
--
-- A response entry names its target URI's invalidation record and variant list (KEYS[2],
-- KEYS[3], in the entry's hash slot): an entry whose computation started at or before the
-- URI's last invalidation is not stored (it may predate the change), and a stored one is
-- listed, so that the next invalidation of the URI deletes it. A hit then reads the entry
-- alone.
--
-- KEYS[1]  the entry's key
-- KEYS[2]  optional: the target URI's invalidation record (µs, as invalidate.lua writes it)
-- KEYS[3]  optional, with KEYS[2]: the target URI's variant list (a set of entry keys)
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- ARGV[2]  `E` (entry) or `P` (hit-for-pass)
-- ARGV[3]  when the request that computed it read the key, µs on the shifted clock (a time
--          past now is now: a value written without a read)
-- ARGV[4]  how long it stays fresh from now, µs (jitter included)
-- ARGV[5]  how long it may be served stale after that, µs
-- ARGV[6]  the blob
-- ARGV[7]  how long past its freshness the key is kept at least, µs (stale-if-error)
-- ARGV[8]  optional: `NX`
-- Reply    now, µs; nil when `NX` found the key taken, or the URI was invalidated since the
--          computation started
local now = clock()
local started = math.min(tonumber(ARGV[3]), now)
local fresh, stale = tonumber(ARGV[4]), tonumber(ARGV[5])
local listed = KEYS[3] ~= nil and ARGV[2] == 'E'
if listed then
  local at = redis.pcall('GET', KEYS[2])
  -- A record that is not a time of ours counts as an invalidation right now.
  if type(at) == 'string' and (tonumber(at) or math.huge) >= started then
    return false
  end
end
local delta = math.max(0, now - started)
-- The header of cache/entry.rs: the magic, the kind, then the four times as big-endian u64s
-- (below 2^53: a double holds them exactly, and `struct` converts them so).
local function u64(n)
  return math.max(0, math.min(n, 9007199254740992))
end
local line = 'RGC3' .. ARGV[2] .. struct.pack('>I8I8I8I8', u64(now + fresh),
  u64(now + fresh + stale), u64(started), u64(delta))
local px = math.max(1, cdiv(fresh + math.max(stale, tonumber(ARGV[7])), 1000))
if ARGV[8] == 'NX' then
  if not redis.call('SET', KEYS[1], line .. ARGV[6], 'PX', px, 'NX') then
    return false
  end
else
  redis.call('SET', KEYS[1], line .. ARGV[6], 'PX', px)
end
if listed then
  -- A list of another type (not ours) is replaced.
  if redis.call('TYPE', KEYS[3]).ok ~= 'set' then
    redis.call('DEL', KEYS[3])
  end
  redis.call('SADD', KEYS[3], KEYS[1])
  -- The list outlives every entry it names.
  if redis.call('PTTL', KEYS[3]) < px then
    redis.call('PEXPIRE', KEYS[3], px)
  end
end
return fmt(now)
