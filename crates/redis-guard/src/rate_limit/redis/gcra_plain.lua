-- Decide requests whose rules are all GCRA, each request all or nothing, one after the other in
-- order, at one Redis time: the decisions of evaluate.lua with gcra.lua, for enforced rules with
-- a cost of at least 1 that read no override record, decided for good (no dry run). The rules'
-- numbers come once per call, not once per request: a request brings only its keys.
--
-- KEYS     per request, per rule in order, its state key
-- ARGV[1]  a time shift in µs added to Redis TIME (0 in production)
-- ARGV[2]  per rule, its burst, emission interval (µs) and cost, `<burst>:<emission>:<cost>`,
--          the rules' joined by `,` (one argument: the client frames each argument of every
--          call, and these never change)
-- Reply    one array, request after request, one integer per key: admitted, the TAT its reset
--          counts to, less now (>= 0); denied, now less the TAT, less 1 (< 0). Or, for a
--          request with a key Redis cannot GET (a key of another type), the error's text as
--          one string, and nothing counted for it. A call of one key replies with that one
--          integer (or string) alone, not in an array: the client reads a bare integer for
--          less than an array of one.
-- Built as backend/prelude.lua, then this file.
local now = clock()
local burst, em, cost, n = {}, {}, {}, 0
for b, e, c in string.gmatch(ARGV[2] or '', '(%d+):(%d+):(%d+)') do
  n = n + 1
  burst[n], em[n], cost[n] = tonumber(b), tonumber(e), tonumber(c)
end
if n < 1 or #ARGV > 2 or #KEYS % n ~= 0 then
  return redis.error_reply('RG_ARITY ' .. #KEYS .. ' keys and ' .. n .. ' rules')
end
-- The TAT of every key read so far, as the requests before left it (false: none); the TATs to
-- store: a key many requests share (one busy client) is read once and written once per call.
local tats, dirty, out, nout, new = {}, {}, {}, 0, {}
for k = 0, #KEYS - n, n do
  local admitted, failed = true, nil
  for i = 1, n do
    local key = KEYS[k + i]
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
    if not tat or tat < now then tat = now end
    new[i] = tat + cost[i] * em[i]
    if now < new[i] - burst[i] * em[i] then
      out[nout + i], admitted = now - tat - 1, false
    else
      out[nout + i] = new[i] - now
    end
  end
  if failed then
    out[nout + 1] = failed
    for x = nout + 2, nout + n do out[x] = nil end
    nout = nout + 1
  else
    if admitted then
      for i = 1, n do tats[KEYS[k + i]], dirty[KEYS[k + i]] = new[i], new[i] end
    end
    nout = nout + n
  end
end
-- The key expires when its TAT passes: by then the client is as fresh as a new one.
for key, tat in pairs(dirty) do
  redis.call('SET', key, fmt(tat), 'PX', cdiv(tat - now, 1000))
end
if #KEYS == 1 then
  return out[1]
end
return out
