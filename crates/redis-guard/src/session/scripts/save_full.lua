-- The full save of one entry of save.lua (which has the call's layout, the reply and the lean
-- path most saves take): any save, of a session in any layout. save.lua builds it only when an
-- entry needs it, as the body of a function of `now` (the call's clock) placed after
-- record.lua, and this file returns `save(key, at, args)` (its arguments are ARGV[at] to
-- ARGV[at + args - 1]: idle, max lifetime, freshness, mode, clear, n, the n pairs, the fields
-- to delete) and record.lua's `each_entry`.
--
-- An update within the freshness interval of the session's last use recorded (as a load
-- decides it, load.lua) writes the fields alone: no new last-seen time, no PEXPIRE, as a read
-- in that interval writes nothing. Its times and TTL stay as the last use recorded set them,
-- and agree with each other, which is what the plain read (session/redis_load.rs) relies on.

local function save(key, at, args)
  local idle = number(ARGV[at])
  local mode, clear, n = ARGV[at + 3], ARGV[at + 4] == '1', number(ARGV[at + 5])
  local last = at + args - 1
  if not n or at + 5 + 2 * n > last then
    return redis.error_reply('RG_ARITY a save of ' .. tostring(n) .. ' fields in ' .. args
      .. ' arguments')
  end
  local exp, seen
  if mode == 'create' then
    if redis.call('EXISTS', key) == 1 then
      return redis.error_reply('RG_COLLISION session id collision')
    end
    exp = now + number(ARGV[at + 1])
    -- Written by `touch` below, with the device this save carries.
    meta[key] = { created = now, exp = exp, seen = now, dev = '' }
  else
    exp, seen = live(key, now, idle)
    if exp == nil then return false end
  end
  if clear then
    local fields = redis.call('HKEYS', key)
    for _, f in ipairs(fields) do
      if string.sub(f, 1, 1) ~= '$' then redis.call('HDEL', key, f) end
    end
  end
  local i = at + 6
  local relife = false
  -- Written by `touch` below, in one HSET with the times.
  local sets = {}
  for _ = 1, n do
    local field = ARGV[i]
    if field == '$dev' then
      meta[key].dev, meta[key].dev_due = ARGV[i + 1], true
    else
      sets[#sets + 1] = field
      sets[#sets + 1] = ARGV[i + 1]
    end
    if field == '$max' or field == '$idle' then relife = true end
    i = i + 2
  end
  while i <= last do
    redis.call('HDEL', key, ARGV[i])
    i = i + 1
  end
  if relife then
    -- This session's own lifetimes (set_max_lifetime, set_idle_timeout) take over from now,
    -- as written.
    hset(key, sets)
    sets = {}
    local m = redis.call('HMGET', key, '$max', '$idle')
    local created, own_max, own = meta[key].created, tonumber(m[1]), tonumber(m[2])
    if created and own_max then
      exp = created + own_max
      if now >= exp then
        redis.call('DEL', key)
        return false
      end
    end
    if own then own_idle[key] = own end
  end
  local r = meta[key]
  if seen and not relife and not r.old and not r.dev_due and now - seen < number(ARGV[at + 2])
  then
    hset(key, sets)
    return exp
  end
  touch(key, now, exp, idle, sets)
  return exp
end

return save, each_entry
