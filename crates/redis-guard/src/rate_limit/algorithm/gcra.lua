-- GCRA (generic cell rate algorithm) for one rule.
--
-- State: one string key holding the theoretical arrival time (TAT), in microseconds of Redis TIME,
-- as a decimal integer. It expires when the TAT passes (PX), so an idle client costs nothing.
--
-- gcra(key, now, p) with p = { limit, period, burst, emission, cost } (integers, microseconds)
-- returns allowed (boolean), remaining, retry_after_us, reset_after_us, commit (function or nil).
-- `commit` records the request; the dispatcher calls it only when every rule admitted it.
-- A stored value that is not a number (someone wrote the key) is treated as no state.
local function gcra(key, now, p)
  local e, b, c = p.emission, p.burst, p.cost
  local tat = tonumber(redis.call('GET', key))
  if tat == nil or tat < now then tat = now end
  local new_tat = tat + c * e
  local allow_at = new_tat - b * e
  if now < allow_at then
    local remaining = idiv(now + b * e - tat, e)
    if remaining < 0 then remaining = 0 end
    return false, remaining, allow_at - now, tat - now, nil
  end
  local reset = new_tat - now
  local commit = function()
    redis.call('SET', key, string.format('%.0f', new_tat), 'PX', cdiv(reset, 1000))
  end
  return true, idiv(now - allow_at, e), 0, reset, commit
end

-- Gives back `cost` emission intervals (Cluster: another slot denied the request). Other requests
-- may have moved the TAT since; subtracting our share is right whatever they did.
local function gcra_refund(key, now, p)
  local tat = tonumber(redis.call('GET', key))
  if tat == nil then return end
  local new_tat = tat - p.cost * p.emission
  if new_tat <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%.0f', new_tat), 'PX', cdiv(new_tat - now, 1000))
  end
end
