-- Claims an idempotency record for one request, unless a live record is there.
-- A record is `RGI1 <F|D> <until µs> <token>\n<rest>` (see idempotency/record.rs): `F` a
-- request in flight until its lease ends, `D` a completed one kept until its retention ends.
--
-- KEYS[1]  the record's key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production; tests move time with it)
-- ARGV[2]  the claiming request's token
-- ARGV[3]  the lease, µs
-- ARGV[4]  the rest of the in-flight record (the request's fingerprint)
-- Reply    {'claimed'}; {'found', the live record}; or {'foreign'} when the key holds a value
--          that is not a record (another type, another format): left as it is
local now = clock()
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return {'foreign'}
end
if v then
  local kind, till = string.match(v, '^RGI1 ([FD]) (%d+) %S+\n')
  if not kind then
    return {'foreign'}
  end
  if tonumber(till) > now then
    return {'found', v}
  end
end
local lease = tonumber(ARGV[3])
local line = string.format('RGI1 F %.0f %s\n', now + lease, ARGV[2])
redis.call('SET', KEYS[1], line .. ARGV[4], 'PX', math.max(1, math.ceil(lease / 1000)))
return {'claimed'}
