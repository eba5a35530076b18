-- Charge a request's rules more than they took when it was admitted: the cost the response
-- reported was higher (Rule::charged_after_response). Whatever is left, never denied: the key
-- may go past its limit and then waits as long as the debt says.
--
-- Built like the refund script: prelude.lua, the algorithm files, a table `charges` mapping
-- algorithm ids to their charge functions, then this file. Custom algorithms have none: they
-- are skipped.
--
-- KEYS and ARGV  as the refund script: ARGV[2] the request id (the sliding log names the units
--                 with it), ARGV[3] the time of the evaluation (unused: a charge lands now), then
--                 6 per key, the cost being what to add.
-- Reply          the number of keys charged.
local now = clock()
local bad_arity = check_arity()
if bad_arity then return bad_arity end
local charged = 0
for i = 1, #KEYS do
  local p = params(3 + (i - 1) * 6, ARGV[2])
  local charge = charges[p.id]
  if type(charge) == 'function' and p.cost > 0 then
    charge(KEYS[i], now, p)
    charged = charged + 1
  end
end
return charged
