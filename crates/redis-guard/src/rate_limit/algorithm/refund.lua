-- Give back what one request took under some rules: on a Redis Cluster, rules whose keys live in
-- different slots are decided slot by slot, and when a later slot denies, the slots that already
-- admitted the request are refunded with this script.
--
-- Built like the evaluation script: prelude.lua, the algorithm files, a table `refunds` mapping
-- algorithm ids to their refund functions, then this file.
--
-- KEYS and ARGV  as the evaluation call they undo, except ARGV[3]: the time that evaluation
--                 returned (µs), so a refund gives back only what that request took, in the window
--                 it was counted in (`p.charged_at` below), never quota of a later window.
-- Reply          the number of keys refunded.
local now = clock()
local bad_arity = check_arity()
if bad_arity then return bad_arity end
local charged_at = tonumber(ARGV[3])
if charged_at == nil then
  return redis.error_reply('RG_ARGUMENT a refund needs the evaluation time in ARGV[3]')
end
for i = 1, #KEYS do
  local p = params(3 + (i - 1) * 6, ARGV[2])
  p.charged_at = charged_at
  local refund = refunds[p.id]
  if type(refund) == 'function' then refund(KEYS[i], now, p) end
end
return #KEYS
