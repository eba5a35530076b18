-- Invalidates a tag: records when, so that every entry computed before now is void. For a
-- target URI, also deletes every entry its variant list names (a hit on them reads no record).
--
-- KEYS[1]  the tag's key
-- KEYS[2]  optional: the target URI's variant list (a set of entry keys, in KEYS[1]'s slot)
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- ARGV[2]  how long to keep the record, ms: at least the longest life of an entry
-- Reply    now, µs (the tag's new invalidation time; it never moves back)
local now = clock()
local old = redis.pcall('GET', KEYS[1])
if type(old) == 'string' and tonumber(old) and tonumber(old) > now then
  now = tonumber(old)
end
local v = fmt(now)
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
if KEYS[2] then
  local entries = redis.pcall('SMEMBERS', KEYS[2])
  if type(entries) == 'table' and not entries.err then
    -- In slices: `unpack` has a bound on its arguments.
    for i = 1, #entries, 1000 do
      redis.call('DEL', unpack(entries, i, math.min(i + 999, #entries)))
    end
  end
  redis.call('DEL', KEYS[2])
end
return v
