-- Decide and record requests whose rules are all GCRA (the default algorithm), each request all
-- or nothing: the decisions of evaluate.lua with gcra.lua, inline, because this is the script
-- almost every request runs. Every function or table a call makes costs Redis time (see
-- docs/benchmarks.md): it makes the override helpers only when a rule reads a record, and no
-- table but the replies, the TATs and the records of keys that have one.
--
-- Coalesced form (backend/coalesce.rs), as evaluate.lua: KEYS, ARGV[1] (time shift) and
-- ARGV[2] (number of entries), then per entry its key count, its argument count (2 + 8n) and
-- its arguments: a request id (unused), the flags (1: dry run; 2: compact reply; 3: both), and
-- per rule evaluate.lua's eight (burst, emission interval, cost and bans are read; the limit is
-- echoed; a throttled rule takes the general script).
-- Reply    flat: one array of every entry's reply, each exactly evaluate.lua's (five integers
--          per rule, then the time), or the error's text for an entry with a key Redis cannot
--          GET. A compact entry (its rules read no override record) replies one integer per
--          rule: admitted, the TAT its reset counts to less now (µs, >= 0); denied, now less the
--          TAT, less 1 (< 0). The caller derives the rest from the rules' quotas and costs.
-- Built as backend/prelude.lua, entries.lua, overrides.lua inside `overrides()` (which returns
-- its four helpers), then this file.
local now = clock()
-- The TAT of every key read so far (false: none) and the TATs to store: a key many entries
-- share (one busy client) is read once and written once per call.
local tats, dirty = {}, nil
-- The same for override records, made by the first rule that reads one.
local ovs, ov_dirty
local out, nout, k, a = nil, 0, 0, 2
local entries = tonumber(ARGV[2]) or -1
-- With several entries each string is converted once per call: tonumber costs Redis more than
-- a table lookup, and the entries of one rule pass the same strings.
local num = tonumber
if entries > 1 then
  local nums = {}
  num = function(s)
    if s == nil then return nil end
    local v = nums[s]
    if v == nil then
      v = tonumber(s) or false
      nums[s] = v
    end
    return v or nil
  end
end
for e = 1, entries do
  local n, m, nk = entry_counts(e, k, a, num)
  if n == nil then return m end
  a = a + 2
  local flags = ARGV[a + 2]
  local dry, compact = flags == '1' or flags == '3', flags == '2' or flags == '3'
  local kk = k
  -- reply[5i-4 .. 5i] is rule i's row; while deciding, reply[5i-1] holds a counted rule's new
  -- TAT (0: admitted without counting) until the commit below replaces it with 0.
  local reply, admitted, failed = n == 1 and { 0, 0, 0, 0, 0, 0 } or {}, true, nil
  for i = 1, n do
    local o, r, key = a + 2 + (i - 1) * 8, (i - 1) * 5, KEYS[kk + 1]
    local b, em, c = num(ARGV[o + 4]), num(ARGV[o + 5]), num(ARGV[o + 6])
    -- Cost 0 is a probe: would one unit be admitted? Decided as cost 1, recorded never.
    local probe = c == 0
    if probe then c = 1 end
    -- `0`: the rule reads no override record; `1`: it does; else its bans (it does too).
    local spec, okey = ARGV[o + 7], nil
    if spec == '0' then
      kk = kk + 1
    else
      okey, kk = KEYS[kk + 2], kk + 2
    end
    local tat = tats[key]
    if tat == nil then
      -- A key of another type fails its own entry, not the others of this call.
      local v = redis.pcall('GET', key)
      if type(v) == 'table' and v.err then
        failed = v.err
        break
      end
      -- "<TAT>:<emission>" when the general script last wrote it (same rule, same quota).
      tat = tonumber(v) or (v and tonumber(string.match(v, '^(%d+):%d+$'))) or false
      tats[key] = tat
    end
    local ov, wait = false, 0
    if okey then
      if not ovs then
        ovs, ov_dirty = {}, {}
        ov_parse, ov_wait, ov_strike, ov_write = overrides()
      end
      ov = ovs[okey]
      if ov == nil then
        local v = redis.pcall('GET', okey)
        if type(v) == 'table' and v.err then
          failed = v.err
          break
        end
        ov = ov_parse(v, now)
        ovs[okey] = ov
      end
      wait = ov_wait(ov, now)
    end
    if not tat or tat < now then tat = now end
    local new_tat = tat + c * em
    local allow_at = new_tat - b * em
    reply[r + 2] = num(ARGV[o + 2])
    if now < allow_at then
      local remaining = idiv(now + b * em - tat, em)
      if remaining < 0 then remaining = 0 end
      reply[r + 1], reply[r + 3] = 0, remaining
      reply[r + 4], reply[r + 5] = cdiv(allow_at - now, 1000), cdiv(tat - now, 1000)
      if wait == 0 and not dry and okey and spec ~= '1' then
        ov = ov_strike(ov, now, spec)
        ovs[okey], ov_dirty[okey] = ov, true
        wait = ov_wait(ov, now)
      end
    elseif probe then
      -- Admitted without counting: what is left now, and the reset of the state as it stands.
      reply[r + 1], reply[r + 3] = 1, idiv(now - allow_at, em) + 1
      reply[r + 4], reply[r + 5] = 0, cdiv(tat - now, 1000)
    else
      reply[r + 1], reply[r + 3] = 1, idiv(now - allow_at, em)
      reply[r + 4], reply[r + 5] = new_tat, cdiv(new_tat - now, 1000)
    end
    if wait < 0 then
      -- Not counted: what is left is what was left before the request.
      if reply[r + 1] == 1 and not probe then reply[r + 3] = reply[r + 3] + c end
      reply[r + 1], reply[r + 4] = 1, 0
    elseif wait > 0 then
      reply[r + 1], reply[r + 3], reply[r + 4] = 0, 0, cdiv(wait, 1000)
      if reply[r + 5] < reply[r + 4] then reply[r + 5] = reply[r + 4] end
    end
    if reply[r + 1] == 0 then admitted = false end
    if compact then
      -- The compact reply's integer, in the place of the limit (the caller knows it).
      if reply[r + 1] == 0 then
        reply[r + 2] = now - tat - 1
      elseif probe then
        reply[r + 2] = tat - now
      else
        reply[r + 2] = new_tat - now
      end
    end
  end
  local commit = admitted and not failed and not dry
  kk = k
  for i = 1, failed and 0 or n do
    local r, key = (i - 1) * 5, KEYS[kk + 1]
    kk = kk + (ARGV[a + 2 + (i - 1) * 8 + 7] == '0' and 1 or 2)
    if reply[r + 1] == 1 then
      if commit and reply[r + 4] ~= 0 then
        dirty = dirty or {}
        tats[key], dirty[key] = reply[r + 4], reply[r + 4]
      end
      reply[r + 4] = 0
    end
  end
  if failed then
    out = out or {}
    nout = nout + 1
    out[nout] = failed
  elseif compact then
    out = out or {}
    for i = 1, n do out[nout + i] = reply[i * 5 - 3] end
    nout = nout + n
  elseif not out then
    -- The first entry's reply starts the call's: no copy (a table grown one value at a time
    -- costs Redis more than the copy saves).
    reply[n * 5 + 1] = now
    out, nout = reply, n * 5 + 1
  else
    reply[n * 5 + 1] = now
    for j = 1, n * 5 + 1 do out[nout + j] = reply[j] end
    nout = nout + n * 5 + 1
  end
  k, a = k + nk, a + m
end
local misfit = entries_misfit(entries, k, a)
if misfit then return misfit end
-- The key expires when its TAT passes: by then the client is as fresh as a new one.
if dirty then
  for key, tat in pairs(dirty) do
    redis.call('SET', key, fmt(tat), 'PX', cdiv(tat - now, 1000))
  end
end
if ov_dirty then
  for key in pairs(ov_dirty) do ov_write(key, ovs[key], now) end
end
return out or {}
