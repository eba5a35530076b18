-- Write sessions' changed fields, in one round trip: the coalesced form (backend/coalesce.rs,
-- `each_entry` in record.lua), one entry per save, run in order, each exactly as alone. Never
-- re-creates a session that is gone.
-- KEYS     one session hash per entry
-- ARGV     shift, the entry count, then per entry: 1 (its key count), its argument count (6 or
--          more), then idle (µs), max lifetime (µs), how long a use stays fresh (µs), mode
--          ('create' or 'update'), clear (1: delete every user field first), n (fields to set),
--          then n field/value pairs, then the fields to delete
-- Reply    per entry: the absolute expiry (µs), or nil when an update finds no live session
--          (destroyed, revoked or expired meanwhile: the write is dropped, nothing is
--          re-created) or the write gives the session an absolute lifetime that has already
--          passed (it ends); an error (RG_COLLISION: a create found the key taken; a key Redis
--          cannot read as a hash) fails its own entry, as the error's text, not the others
--
-- Most saves are the lean kind: an update of user fields (no clear, no `$` field set or
-- deleted) of a session stored in the current layout, used within the freshness interval.
-- The loop below writes one of those with one HMGET and one HSET (and an HDEL for the fields
-- to delete; no HMGET when the entry before wrote the same session this way), and checks what
-- the full save checks: the session exists, neither its absolute expiry nor its idle timeout
-- (its own, else the layer's) has passed (else it is deleted and the write dropped), and its
-- last use is fresh. Every other entry runs the full save
-- (save_full.lua after record.lua: `full_save(now)`, defined before this file), built once per
-- call and only when an entry needs it: a script's top-level code runs on every call, and the
-- library's definitions cost Redis more than a lean save's commands.
local now = clock()
local argv = ARGV

-- The call's layout, checked before any entry runs (a malformed call writes nothing): the
-- full library's `each_entry` answers a malformed one with its RG_ARITY error.
-- (Texts the entries repeat are converted once: `args_text` was last read as `args`.)
local count = tonumber(argv[2]) or -1
local at = 3
local ok = count == #KEYS
local args_text, args
for _ = 1, ok and count or 0 do
  if argv[at + 1] ~= args_text then args_text, args = argv[at + 1], tonumber(argv[at + 1]) end
  if argv[at] ~= '1' or not args or args < 6 or at + 1 + args > #argv then
    ok = false
    break
  end
  at = at + 2 + args
end
local full, each_entry
if not ok or at - 1 ~= #argv then
  full, each_entry = full_save(now)
  return each_entry(full, function(args) return args >= 6 end, '6 or more arguments')
end

-- Each entry in order, as each_entry runs it: an entry that fails (a key Redis cannot read as
-- a hash, an error reply of ours) has the error's text in its place, the others stand. The
-- code is inline and the numbers the entries repeat (idle, freshness) are converted once:
-- every function call, closure and conversion costs Redis more than the lean save's commands.
local match, byte = string.match, string.byte
local idle_text, fresh_text, n_text, layer_idle, fresh, n
-- The session the entry before wrote on the lean path, and its metadata as that entry read it:
-- a lean write changes no `$` field, so the next entry for the same session (the saves of one
-- session's concurrent requests share a call) decides on it without reading it again.
local known_key, known_exp, known_seen, known_own
local out = {}
at = 3
for e = 1, count do
  local key = KEYS[e]
  local known = key == known_key
  known_key = nil
  if argv[at + 1] ~= args_text then args_text, args = argv[at + 1], tonumber(argv[at + 1]) end
  local first, last = at + 8, at + 1 + args
  -- nil until decided; false: no live session.
  local reply
  -- The lean kind: an update, no clear, no `$` field set or deleted, few enough values for
  -- one HSET (Lua's unpack takes only so many; the full save writes in chunks).
  if argv[at + 7] ~= n_text then n_text, n = argv[at + 7], tonumber(argv[at + 7]) end
  local plain = argv[at + 5] == 'update' and argv[at + 6] ~= '1' and args <= 1000
    and n and n >= 0 and n % 1 == 0 and first + 2 * n - 1 <= last
  if plain then
    for i = first, first + 2 * n - 2, 2 do
      if byte(argv[i]) == 36 then plain = false break end
    end
    for i = first + 2 * n, plain and last or 0 do
      if byte(argv[i]) == 36 then plain = false break end
    end
  end
  if plain then
    if argv[at + 2] ~= idle_text then
      idle_text, layer_idle = argv[at + 2], tonumber(argv[at + 2])
    end
    if argv[at + 4] ~= fresh_text then
      fresh_text, fresh = argv[at + 4], tonumber(argv[at + 4])
    end
    local exp, seen, own
    if known and layer_idle and fresh then
      exp, seen, own = known_exp, known_seen, known_own
    elseif layer_idle and fresh then
      local m = redis.pcall('HMGET', key, '$m', '$idle')
      if m.err then
        reply = m.err
      else
        -- `created:exp:seen`. No `$m` (no session, or one of the earliest layout), or more or
        -- less than the three times (the device inside it, or malformed): the full save
        -- decides.
        exp, seen = match(m[1] or '', '^%d*:(%d+):(%d+)$')
        if seen then exp, seen, own = exp + 0, seen + 0, m[2] and tonumber(m[2]) end
      end
    end
    if seen then
      if now >= exp or now - seen >= (own or layer_idle) then
        redis.call('DEL', key)
        reply = false
      elseif now - seen < fresh then
        -- Fresh: the fields alone (a use due to be marked runs the full save, which writes
        -- the new times and the TTL).
        local deletes = first + 2 * n
        local r = deletes <= last and redis.pcall('HDEL', key, unpack(argv, deletes, last))
        if type(r) ~= 'table' and n > 0 then
          r = redis.pcall('HSET', key, unpack(argv, first, deletes - 1))
        end
        if type(r) == 'table' then
          reply = r.err
        else
          reply = exp
          known_key, known_exp, known_seen, known_own = key, exp, seen, own
        end
      end
    end
  end
  if reply == nil then
    if not full then full, each_entry = full_save(now) end
    local done, r = pcall(full, key, at + 2, args)
    if type(r) == 'table' and r.err then
      reply = r.err
    elseif done then
      reply = r
    else
      reply = 'ERR ' .. tostring(r)
    end
  end
  out[e] = reply
  at = at + 2 + args
end
return out
