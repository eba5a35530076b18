-- Fixed window kept as INCR + EXPIRE keeps it (the `fwc` shape: fixed_window_plain.rs): a plain
-- integer count whose key expires when the window closes, the expiry set by the window's first
-- hit (`PEXPIRE … NX`). These functions serve the requests that need a script: several rules
-- (all or nothing: a denial counts nothing), bans, overrides, probes, inspect, refunds, charges.
--
-- State: "<count>" at key, expiring with the window. The window's clock is the key's expiry.
-- fixed_window_counter(key, now, p) returns allowed, remaining, retry_after_us, reset_after_us,
-- commit.
-- The open window's count and the µs until it closes (a new window: 0 and the period).
local function fixed_window_counter_open(key, p)
  local count = tonumber(redis.call('GET', key) or '0') or 0
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then return count, p.period end
  return count, math.max(ttl * 1000, 1)
end

local function fixed_window_counter(key, now, p)
  local count, left = fixed_window_counter_open(key, p)
  if count + p.cost > p.limit then
    local remaining = p.limit - count
    if remaining < 0 then remaining = 0 end
    return false, remaining, left, left, nil
  end
  local commit = function()
    redis.call('INCRBY', key, p.cost)
    redis.call('PEXPIRE', key, cdiv(p.period, 1000), 'NX')
  end
  -- A probe records nothing: a window that counts nothing has nothing to reset.
  local reset = (p.probe and count == 0) and 0 or left
  return true, p.limit - count - p.cost, 0, reset, commit
end

-- Uncounts `cost` if the window open now is the one the request was counted in (at
-- `p.charged_at`, Redis TIME µs). A window opens at its expiry less the period, in Redis' own
-- milliseconds; one that opened after the request was counted is a later window, whose quota
-- is not given away.
local function fixed_window_counter_refund(key, now, p)
  local expires = redis.call('PEXPIRETIME', key)
  if expires < 0 then return end
  if idiv(p.charged_at, 1000) < expires - cdiv(p.period, 1000) then return end
  local count = tonumber(redis.call('GET', key) or '0') or 0
  local back = math.min(count, p.cost)
  if back > 0 then redis.call('DECRBY', key, back) end
end

-- Counts `cost` more in the open window (a new one if none is open) whatever is left.
local function fixed_window_counter_charge(key, now, p)
  redis.call('INCRBY', key, p.cost)
  redis.call('PEXPIRE', key, cdiv(p.period, 1000), 'NX')
end
