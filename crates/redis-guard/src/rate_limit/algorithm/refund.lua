-- Give back what one request took under some rules: on a Redis Cluster, rules whose keys live in
-- different slots are decided slot by slot, and when a later slot denies, the slots that already
-- admitted the request are refunded with this script.
--
-- Built like the evaluation script: prelude.lua, the algorithm files, a table `refunds` mapping
-- algorithm ids to their refund functions, then this file.
--
-- KEYS and ARGV  exactly as the evaluation call they undo (ARGV[3], the dry-run flag, is ignored).
-- Reply          the number of keys refunded.
local now = clock()
local bad_arity = check_arity()
if bad_arity then return bad_arity end
for i = 1, #KEYS do
  local p = params(i)
  local refund = refunds[p.id]
  if type(refund) == 'function' then refund(KEYS[i], now, p) end
end
return #KEYS
