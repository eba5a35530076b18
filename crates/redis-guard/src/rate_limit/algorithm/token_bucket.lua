-- Token bucket for one rule: a bucket of `burst` tokens refilled at `limit` per `period` (one
-- token per emission interval). A request takes `cost` tokens, and is rejected, taking none,
-- when fewer than `cost` are left.
--
-- State: one string key "<credit µs>:<last update µs>". Tokens are kept as refill time
-- (tokens × emission interval), an integer, so fractional tokens need no floating point and the
-- count can never go negative. The key expires when the bucket would be full again.
-- token_bucket(key, now, p) returns allowed, remaining, retry_after_us, reset_after_us, commit.
local function token_bucket(key, now, p)
  local E, cap, need = p.emission, p.burst * p.emission, p.cost * p.emission
  local credit, ts = string.match(redis.call('GET', key) or '', '^(%d+):(%d+)$')
  credit, ts = tonumber(credit), tonumber(ts)
  if credit == nil or ts > now then
    credit = cap
  else
    credit = math.min(cap, credit + (now - ts))
  end
  if credit < need then
    return false, idiv(credit, E), need - credit, cap - credit, nil
  end
  local left = credit - need
  local commit = function()
    redis.call('SET', key, string.format('%.0f:%.0f', left, now),
      'PX', cdiv(cap - left, 1000))
  end
  return true, idiv(left, E), 0, cap - left, commit
end

-- Puts `cost` tokens back, up to the capacity (Cluster: another slot denied the request).
local function token_bucket_refund(key, now, p)
  local E, cap = p.emission, p.burst * p.emission
  local credit, ts = string.match(redis.call('GET', key) or '', '^(%d+):(%d+)$')
  credit, ts = tonumber(credit), tonumber(ts)
  if credit == nil or ts > now then return end
  credit = math.min(cap, credit + (now - ts) + p.cost * E)
  if credit >= cap then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%.0f:%.0f', credit, now), 'PX', cdiv(cap - credit, 1000))
  end
end
