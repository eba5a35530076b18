-- Decide requests whose rules are all GCRA, each request all or nothing, one after the other in
-- order, at one Redis time: the decisions of evaluate.lua with gcra.lua, for enforced rules with
-- a cost of at least 1, decided for good (no dry run). The rules' numbers come once per call,
-- not once per request: a request brings only its keys.
--
-- KEYS     per request, per rule in order its state key, then its override record's key when
--          the rule reads one (its spec is not `0`)
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production)
-- ARGV[2]  per rule, its burst, emission interval (µs) and cost, `<burst>:<emission>:<cost>`,
--          the rules' joined by `,` (one argument: the client frames each argument of every
--          call, and these never change)
-- ARGV[3]  only when a rule reads an override record: per rule its spec, joined by `,`: `0`,
--          it reads none; `1`, it does; else its bans (`after:within:block:max:forget`, µs),
--          which a denial counts
-- Reply    one array, request after request, one integer per key: per rule, admitted, the TAT
--          its reset counts to, less now (>= 0); denied, now less the TAT, less 1 (< 0); then,
--          for a rule that reads a record, what the record does (overrides.lua's `ov_wait`:
--          -1, admitted without counting; > 0, blocked for that many µs; 0, nothing). Or, for a
--          request with a key Redis cannot GET (a key of another type), the error's text as
--          one string, and nothing counted for it. A call of one key replies with that one
--          integer (or string) alone, not in an array: the client reads a bare integer for
--          less than an array of one.
-- Built as backend/prelude.lua, overrides.lua inside `overrides()` (which returns its four
-- helpers), then this file.
local now = clock()
local burst, em, cost, n = {}, {}, {}, 0
for b, e, c in string.gmatch(ARGV[2] or '', '(%d+):(%d+):(%d+)') do
  n = n + 1
  burst[n], em[n], cost[n] = tonumber(b), tonumber(e), tonumber(c)
end
-- Per rule its spec, when any rule reads a record; the keys of one request.
local spec, width = nil, n
if ARGV[3] then
  spec = {}
  for s in string.gmatch(ARGV[3], '[^,]+') do
    spec[#spec + 1] = s
    if s ~= '0' then width = width + 1 end
  end
  if #spec ~= n then width = 0 end
end
if n < 1 or #ARGV > 3 or width == 0 or #KEYS % width ~= 0 then
  return redis.error_reply('RG_ARITY ' .. #KEYS .. ' keys and ' .. n .. ' rules')
end
-- The TAT of every key read so far, as the requests before left it (false: none); the TATs to
-- store: a key many requests share (one busy client) is read once and written once per call.
-- The same for override records, made by the first rule that reads one.
local tats, dirty, out, nout, new, keys = {}, {}, {}, 0, {}, {}
local ovs, ov_dirty
for k = 0, #KEYS - width, width do
  local admitted, failed, j = true, nil, k
  for i = 1, n do
    local key, okey = KEYS[j + 1], nil
    if spec and spec[i] ~= '0' then okey = KEYS[j + 2] end
    local tat = tats[key]
    if tat == nil then
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
    keys[i], new[i] = key, tat + cost[i] * em[i]
    if now < new[i] - burst[i] * em[i] then
      out[nout + j - k + 1] = now - tat - 1
      if wait == 0 and okey and spec[i] ~= '1' then
        ov = ov_strike(ov, now, spec[i])
        ovs[okey], ov_dirty[okey] = ov, true
        wait = ov_wait(ov, now)
      end
      if wait >= 0 then admitted = false end
    else
      out[nout + j - k + 1] = new[i] - now
      if wait > 0 then admitted = false end
    end
    -- Counted only when no record decided.
    if wait ~= 0 then new[i] = false end
    if okey then
      out[nout + j - k + 2], j = wait, j + 2
    else
      j = j + 1
    end
  end
  if failed then
    out[nout + 1] = failed
    for x = nout + 2, nout + width do out[x] = nil end
    nout = nout + 1
  else
    if admitted then
      for i = 1, n do
        if new[i] then tats[keys[i]], dirty[keys[i]] = new[i], new[i] end
      end
    end
    nout = nout + width
  end
end
-- The key expires when its TAT passes: by then the client is as fresh as a new one.
for key, tat in pairs(dirty) do
  redis.call('SET', key, fmt(tat), 'PX', cdiv(tat - now, 1000))
end
if ov_dirty then
  for key in pairs(ov_dirty) do ov_write(key, ovs[key], now) end
end
if #KEYS == 1 then
  return out[1]
end
return out
