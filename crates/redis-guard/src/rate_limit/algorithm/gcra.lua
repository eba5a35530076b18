-- GCRA (generic cell rate algorithm) for one rule.
--
-- State: one string key "<TAT>:<emission interval>": the theoretical arrival time, in
-- microseconds of Redis TIME, and the emission interval (µs) of the quota it was computed with,
-- as decimal integers. It expires when the TAT passes (PX), so an idle client costs nothing. The
-- lean script (redis/gcra_plain.lua) keeps a bare "<TAT>" for rules whose quota never varies;
-- both read both.
--
-- gcra(key, now, p) with p = { limit, period, burst, emission, cost, max_wait } (integers,
-- microseconds) returns allowed (boolean), remaining, retry_after_us, reset_after_us, commit
-- (function or nil); admitted with retry_after_us > 0: after that wait (at most p.max_wait).
-- `commit` records the request; the dispatcher calls it only when every rule admitted it.
-- A stored value that is not ours (someone wrote the key) is treated as no state.

-- The TAT stored in `v` (a GET reply) in the terms of p's quota, or nil. A TAT kept under another
-- emission interval (the key's quota changed: a plan upgrade) is rescaled so that the units it
-- holds carry over, at most the burst: the key has used as many requests of its new quota as of
-- its old one.
local function gcra_tat(v, now, p)
  local tat = tonumber(v)
  if tat ~= nil or not v then return tat end
  local t, e = string.match(v, '^(%d+):(%d+)$')
  tat, e = tonumber(t), tonumber(e)
  if tat == nil or e == nil or e < 1 then return nil end
  if e ~= p.emission and tat > now then
    tat = now + math.min(math.ceil((tat - now) / e * p.emission), p.burst * p.emission)
  end
  return tat
end

-- Stores `tat` under p's emission interval (`bare`: alone, as the lean script keeps it), living
-- until it passes.
local function gcra_store(key, tat, now, p, bare)
  local v = bare and fmt(tat) or fmt(tat, p.emission)
  redis.call('SET', key, v, 'PX', cdiv(tat - now, 1000))
end

local function gcra(key, now, p)
  local e, b, c = p.emission, p.burst, p.cost
  local tat = gcra_tat(redis.call('GET', key), now, p)
  if tat == nil or tat < now then tat = now end
  local new_tat = tat + c * e
  local allow_at = new_tat - b * e
  if now < allow_at then
    if allow_at - now <= (p.max_wait or 0) then
      -- Throttled (Rule::throttle): admitted at allow_at, the TAT moved now as if admitted
      -- then, so the requests after it queue behind its slot.
      local commit = function() gcra_store(key, new_tat, now, p) end
      return true, 0, allow_at - now, new_tat - now, commit
    end
    local remaining = idiv(now + b * e - tat, e)
    if remaining < 0 then remaining = 0 end
    return false, remaining, allow_at - now, tat - now, nil
  end
  -- A probe records nothing: the reset is the state's as it stands.
  local reset = p.probe and tat - now or new_tat - now
  local commit = function() gcra_store(key, new_tat, now, p) end
  return true, idiv(now - allow_at, e), 0, reset, commit
end

-- Gives back `cost` emission intervals (Cluster: another slot denied the request). Other requests
-- may have moved the TAT since; subtracting our share is right whatever they did.
-- The value keeps its form: the lean script's bare TAT stays bare.
local function gcra_refund(key, now, p)
  local v = redis.call('GET', key)
  local tat = gcra_tat(v, now, p)
  if tat == nil then return end
  local new_tat = tat - p.cost * p.emission
  if new_tat <= now then
    redis.call('DEL', key)
  else
    gcra_store(key, new_tat, now, p, tonumber(v) ~= nil)
  end
end

-- Charges `cost` more emission intervals whatever is left (a cost reported after the response):
-- the TAT may move past the burst, and the key then waits until the debt is paid.
local function gcra_charge(key, now, p)
  local v = redis.call('GET', key)
  local tat = gcra_tat(v, now, p)
  if tat == nil or tat < now then tat = now end
  gcra_store(key, tat + p.cost * p.emission, now, p, tonumber(v) ~= nil)
end
