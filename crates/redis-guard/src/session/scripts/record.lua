-- The session record, and the helpers every session script uses (each starts with this file,
-- after the crate's prelude, backend/prelude.lua: clock, cdiv, fmt; save.lua has it inside a
-- function it calls only for the saves its lean path does not take, see session/scripts.rs).
--
-- A session is a hash: user fields (serde JSON values) plus metadata fields that start with `$`:
--   $m        `created:exp:seen`, in one field so that a read carries one metadata pair, not
--             three; at most 50 bytes, within Redis' listpack limit for a value
--             (`hash-max-listpack-value`, 64), so a small session stays a compact hash:
--               created  creation time, µs of Redis TIME (empty in sessions stored without it)
--               exp      absolute expiry, µs (creation + the maximum lifetime)
--               seen     last use, µs (the idle timeout counts from here)
--   $dev      the device, `handle TAB address TAB user agent`: the public handle listings show
--             (random; never the id nor its hash), the client's address and user agent as of
--             the last write or use recorded (either empty when not recorded); written by the
--             layer with a save, never by the load itself, for a session with a user only
--             (sessions stored by earlier releases may hold one without a user); absent when
--             none was recorded
--   $user     the user id, once set_user was called
--   $v        the record format version, "1" (sessions stored before the device field; not
--             written since: every field a session reads is optional or checked)
--   $idle     this session's own idle timeout, µs (set_idle_timeout), instead of ARGV's
--   $max      this session's own absolute lifetime, µs (set_max_lifetime): $exp = $created + $max
-- Two earlier layouts are still read, and rewritten in this one by the session's next write or
-- use recorded (`touch`):
--   - the device inside `$m`, after the three times (`created:exp:seen:dev`, no `$dev`): `touch`
--     moves it to `$dev`;
--   - the three times in fields of their own (`$created`, `$exp`, `$seen`), beside `$dev`:
--     `touch` removes them.
-- The key's TTL follows the sooner of idle and absolute expiry; the scripts also check both
-- times themselves, so a session never outlives either, whatever the TTL says.
--
-- ARGV[1] is always a time shift in µs added to Redis TIME (0 in production; tests move time
-- with it), ARGV[2] the idle timeout in µs.

-- Per session read by `live` in this script run: its own idle timeout, which `touch` then uses
-- in place of the layer's.
local own_idle = {}
-- Per session read by `live` (or written by a save or a rotation) in this script run: its
-- metadata, as `touch` writes it back ({ created, exp, seen, dev, old, dev_due }; `created`:
-- the text `$m` held, or a number; `old`: the times are stored in the fields of the earliest
-- layout; `dev_due`: `$dev` is still to be written, as a save changed the device or it was
-- stored inside `$m`).
local meta = {}

-- Integer arguments by their text, converted once per script run: the entries of a coalesced
-- call repeat the same idle timeout and freshness, and `tonumber` of a string runs `strtod`
-- twice (Lua 5.1 checks, then converts). nil for nil or what is not a number.
local numbers = {}
local function number(text)
  if text == nil then return nil end
  local n = numbers[text]
  if n == nil then
    n = tonumber(text) or false
    numbers[text] = n
  end
  return n or nil
end

-- A time of `$m` (its digits; '' when absent, nil when `$m` is malformed): `+ 0` converts a
-- string with one `strtod`.
local function time_of(digits)
  if not digits or digits == '' then return nil end
  return digits + 0
end

-- The metadata of a session from `$m` (`packed`) and `$dev` (`dev`), else from the fields of
-- the earliest layout; a value that is missing or malformed is nil (the device: empty). A `$m`
-- with a fourth part holds the device of a session stored before `$dev` came back. The creation
-- time from `$m` stays its text (digits): most scripts never compute with it, and converting
-- a 16-digit number is a `strtod` each time.
local function unpack_meta(packed, created, exp, seen, dev)
  if packed then
    local c, e, s, rest = string.match(packed, '^(%d*):(%d*):(%d*)(.*)$')
    if c == '' then c = nil end
    if rest ~= nil and rest ~= '' then
      if string.sub(rest, 1, 1) ~= ':' then return { dev = '' } end
      -- (`dev` is false when HMGET found no `$dev`, nil when a rotation carried none.)
      if not dev then
        return {
          created = c, exp = time_of(e), seen = time_of(s),
          dev = string.sub(rest, 2), dev_due = true,
        }
      end
    end
    return { created = c, exp = time_of(e), seen = time_of(s), dev = dev or '' }
  end
  return {
    created = tonumber(created), exp = tonumber(exp), seen = tonumber(seen), dev = dev or '',
    old = (created or exp or seen) and true or false,
  }
end

-- The absolute expiry of a live session, its last use and its idle timeout (its own, else
-- `idle`), or nil after deleting one that has expired (idle or absolute) or is malformed.
-- The fields of the earliest layout are read only for a session without `$m`.
local function live(key, now, idle)
  local m = redis.call('HMGET', key, '$m', '$idle', '$dev')
  local r
  if m[1] then
    r = unpack_meta(m[1], nil, nil, nil, m[3])
  else
    local t = redis.call('HMGET', key, '$created', '$exp', '$seen')
    r = unpack_meta(nil, t[1], t[2], t[3], m[3])
  end
  local exp, seen = r.exp, r.seen
  if exp == nil or seen == nil then
    if m[1] or r.old or redis.call('EXISTS', key) == 1 then redis.call('DEL', key) end
    return nil
  end
  meta[key] = r
  local mine = tonumber(m[2])
  -- Set or cleared: an earlier entry of a coalesced call may have read the same key.
  own_idle[key] = mine
  if mine then idle = mine end
  if now >= exp or now - seen >= idle then
    redis.call('DEL', key)
    return nil
  end
  return exp, seen, idle
end

-- `%d` writes a session time (an integer of up to 16 digits) exactly where Lua's C long is 64
-- bits (every 64-bit Redis) at a fraction of the cost of fmt's `%.0f`; elsewhere, fmt.
local long_ints = string.format('%d', 2 ^ 53) == '9007199254740992'

-- `created:exp:seen`, as `$m` holds them (`created` empty when unknown; its text, as `$m` held
-- it, is written back as it is).
local function pack_times(created, exp, seen)
  if type(created) == 'string' then
    if long_ints then return created .. string.format(':%d:%d', exp, seen) end
    return created .. ':' .. fmt(exp, seen)
  end
  if not long_ints then return (created and fmt(created) or '') .. ':' .. fmt(exp, seen) end
  if created then return string.format('%d:%d:%d', created, exp, seen) end
  return string.format(':%d:%d', exp, seen)
end

-- HSET of the field/value pairs of the flat list `pairs`, in commands of at most 1,000 values
-- (Lua's unpack takes only so many).
local function hset(key, pairs)
  local n = #pairs
  for from = 1, n, 1000 do
    redis.call('HSET', key, unpack(pairs, from, math.min(from + 999, n)))
  end
end

-- Marks a use: the idle timeout starts again, the TTL follows the sooner expiry. The times are
-- written as `$m`, in one HSET with `$dev` when it is due and with `sets` (a save's fields, as
-- a flat field/value list; optional); a session stored in an earlier layout is rewritten in
-- this one here.
local function touch(key, now, exp, idle, sets)
  idle = own_idle[key] or idle
  local r = meta[key]
  r.exp, r.seen = exp, now
  sets = sets or {}
  sets[#sets + 1] = '$m'
  sets[#sets + 1] = pack_times(r.created, exp, now)
  if r.dev_due and r.dev ~= '' then
    sets[#sets + 1] = '$dev'
    sets[#sets + 1] = r.dev
  end
  hset(key, sets)
  r.dev_due = false
  if r.old then
    redis.call('HDEL', key, '$created', '$exp', '$seen')
    r.old = false
  end
  redis.call('PEXPIRE', key, cdiv(math.min(idle, exp - now), 1000))
end

-- A user's index is a sorted set of session storage keys scored by absolute expiry; it expires
-- with its last session.
local function keep_index(key, now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, math.max(1, cdiv(tonumber(last[2]) - now, 1000)))
  end
end

-- The coalesced form (backend/coalesce.rs): KEYS one session hash per entry; ARGV shift, the
-- entry count, then per entry 1 (its key count), its argument count and its arguments. Runs
-- `run(key, at, args)` (its arguments are ARGV[at] to ARGV[at + args - 1]) for each entry in
-- order, if `fits(args)`; the reply has one element per entry, and an entry that fails (a key
-- Redis cannot read as a hash, an error reply of ours) has the error's text in its place, the
-- others stand. A malformed call is an RG_ARITY error, `expected` saying what an entry takes.
local function each_entry(run, fits, expected)
  local count = tonumber(ARGV[2]) or -1
  local function arity(got)
    return redis.error_reply('RG_ARITY expected 1 key and ' .. expected .. ' per entry, got '
      .. got .. ' for ' .. tostring(ARGV[2]) .. ' entries')
  end
  if count ~= #KEYS then return arity(#KEYS .. ' keys') end
  -- Every entry is checked before any runs: a malformed call writes nothing.
  local starts, sizes = {}, {}
  local at = 3
  for e = 1, count do
    local args = number(ARGV[at + 1])
    if ARGV[at] ~= '1' or not args or not fits(args) or at + 1 + args > #ARGV then
      return arity(#ARGV .. ' arguments')
    end
    starts[e], sizes[e] = at, args
    at = at + 2 + args
  end
  if at - 1 ~= #ARGV then return arity(#ARGV .. ' arguments') end
  local out = {}
  for e = 1, count do
    local ok, reply = pcall(run, KEYS[e], starts[e] + 2, sizes[e])
    if type(reply) == 'table' and reply.err then
      out[e] = reply.err
    elseif ok then
      out[e] = reply
    else
      out[e] = 'ERR ' .. tostring(reply)
    end
  end
  return out
end
