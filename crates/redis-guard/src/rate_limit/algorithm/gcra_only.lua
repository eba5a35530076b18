-- Decide and record requests whose rules are all GCRA (the default algorithm), each request all
-- or nothing: the same decisions as evaluate.lua with gcra.lua, written inline, because this is
-- the script almost every request runs. It defines no function but the two divisions and builds
-- no table but the replies (see docs/benchmarks.md).
--
-- Coalesced form (backend/coalesce.rs): one call carries one or more requests ("entries"),
-- decided one after the other, in order, at one Redis time.
--
-- KEYS     every entry's keys, entry after entry
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production)
-- ARGV[2]  the number of entries
-- ARGV     then per entry: its key count n, its argument count (2 + 6n), then its arguments:
--            a request id (unused here), the dry-run flag (1: decide, record nothing), and per
--            rule the six integers of evaluate.lua (only burst, emission interval and cost are
--            read; the limit is echoed)
-- Reply    one array per entry, exactly evaluate.lua's reply for that request: five integers per
--          rule, then the time of the decision; or, for an entry with a key Redis cannot GET (a
--          key of another type), the error's text as a string, and nothing recorded for it.
-- Built as division.lua, entries.lua, then this file.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
-- The TAT of every key this call has read, as the entries before left it (false: none), and
-- the TAT to store for every key an entry recorded: a key many entries share (one busy client)
-- is read once and written once per call, whatever the number of entries.
local tats, dirty = {}, {}
local out, k, a = {}, 0, 2
local entries = tonumber(ARGV[2]) or -1
for e = 1, entries do
  local n, m = entry_counts(e, k, a)
  if n == nil then return m end
  a = a + 2
  -- reply[5i-4 .. 5i] is rule i's row; while deciding, reply[5i-1] holds an admitted rule's new
  -- TAT until the commit below replaces it with 0.
  local reply, admitted, failed = n == 1 and { 0, 0, 0, 0, 0, 0 } or {}, true, nil
  for i = 1, n do
    local o, r, key = a + 2 + (i - 1) * 6, (i - 1) * 5, KEYS[k + i]
    local b, em, c = tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), tonumber(ARGV[o + 6])
    local tat = tats[key]
    if tat == nil then
      -- A key of another type fails its own entry, not the others of this call.
      local v = redis.pcall('GET', key)
      if type(v) == 'table' and v.err then
        failed = v.err
        break
      end
      tat = tonumber(v) or false
      tats[key] = tat
    end
    if not tat or tat < now then tat = now end
    local new_tat = tat + c * em
    local allow_at = new_tat - b * em
    reply[r + 2] = tonumber(ARGV[o + 2])
    if now < allow_at then
      admitted = false
      local remaining = idiv(now + b * em - tat, em)
      if remaining < 0 then remaining = 0 end
      reply[r + 1], reply[r + 3] = 0, remaining
      reply[r + 4], reply[r + 5] = cdiv(allow_at - now, 1000), cdiv(tat - now, 1000)
    else
      reply[r + 1], reply[r + 3] = 1, idiv(now - allow_at, em)
      reply[r + 4], reply[r + 5] = new_tat, cdiv(new_tat - now, 1000)
    end
  end
  local commit = admitted and not failed and ARGV[a + 2] ~= '1'
  for i = 1, failed and 0 or n do
    local r = (i - 1) * 5
    if reply[r + 1] == 1 then
      if commit then
        local key = KEYS[k + i]
        tats[key], dirty[key] = reply[r + 4], reply[r + 4]
      end
      reply[r + 4] = 0
    end
  end
  reply[n * 5 + 1] = now
  out[e] = failed or reply
  k, a = k + n, a + m
end
local misfit = entries_misfit(entries, k, a)
if misfit then return misfit end
-- The key expires when its TAT passes: by then the client is as fresh as a new one.
for key, tat in pairs(dirty) do
  redis.call('SET', key, string.format('%.0f', tat), 'PX', cdiv(tat - now, 1000))
end
return out
