-- Give back what one request took under some rules: on a Redis Cluster, rules whose keys live in
-- different slots are decided slot by slot, and when a later slot denies, the slots that already
-- admitted the request are refunded with this script.
--
-- Built like the evaluation script: prelude.lua, the algorithm files, a table `refunds` mapping
-- algorithm ids to their refund functions, then this file.
--
-- KEYS and ARGV  exactly as the evaluation call they undo (ARGV[3], the dry-run flag, is ignored).
-- Reply          the number of keys refunded.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
local n = #KEYS
if #ARGV ~= 3 + n * 6 then
  return redis.error_reply('redis-guard: expected 3 + 6 arguments per key, got ' .. #ARGV .. ' for ' .. n .. ' keys')
end
for i = 1, n do
  local o = 3 + (i - 1) * 6
  local refund = refunds[tonumber(ARGV[o + 1])]
  if refund then
    refund(KEYS[i], now, {
      limit = tonumber(ARGV[o + 2]),
      period = tonumber(ARGV[o + 3]),
      burst = tonumber(ARGV[o + 4]),
      emission = tonumber(ARGV[o + 5]),
      cost = tonumber(ARGV[o + 6]),
      req = ARGV[2],
    })
  end
end
return n
