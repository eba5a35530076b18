-- Token bucket for one rule: a bucket of `burst` tokens refilled at `limit` per `period` (one
-- token per emission interval). A request takes `cost` tokens, and is rejected, taking none,
-- when fewer than `cost` are left.
--
-- State: one string key "<credit µs>:<last update µs>:<emission µs>:<burst>". Tokens are kept as
-- refill time (tokens × emission interval), an integer, so fractional tokens need no floating
-- point; it goes negative only for a throttled rule (Rule::throttle), whose admitted waiters
-- owe the tokens they took ahead of time; the emission interval and burst they were counted
-- under let a key whose quota changes keep what it used. The key expires when the bucket would
-- be full again. A bare "<credit>:<last update>" (an earlier version) is read under p's quota.
-- token_bucket(key, now, p) returns allowed, remaining, retry_after_us, reset_after_us, commit.

-- The credit stored at `key`, refilled up to `now`, in the terms of p's quota; nil when there is
-- none. Under another quota (a plan upgrade), the tokens it lacks carry over: the key has used as
-- many tokens of its new bucket as of its old one (and has none left if that is all of them).
local function bucket_credit(key, now, p)
  local v = redis.call('GET', key) or ''
  local credit, ts, e, b = string.match(v, '^(%-?%d+):(%d+):(%d+):(%d+)$')
  if credit == nil then credit, ts = string.match(v, '^(%d+):(%d+)$') end
  credit, ts = tonumber(credit), tonumber(ts)
  e, b = tonumber(e) or p.emission, tonumber(b) or p.burst
  if credit == nil or ts > now or e < 1 then return nil end
  local cap = b * e
  credit = math.min(cap, credit + (now - ts))
  if e ~= p.emission or b ~= p.burst then
    credit = math.max(0, p.burst * p.emission - math.ceil((cap - credit) / e * p.emission))
  end
  return credit
end

-- Stores `credit` at `now`, living until the bucket is full again.
local function bucket_store(key, credit, now, p)
  redis.call('SET', key, fmt(credit, now, p.emission, p.burst),
    'PX', cdiv(p.burst * p.emission - credit, 1000))
end

local function token_bucket(key, now, p)
  local E, cap, need = p.emission, p.burst * p.emission, p.cost * p.emission
  local credit = bucket_credit(key, now, p) or cap
  if credit < need then
    if need - credit <= (p.max_wait or 0) then
      -- Throttled (Rule::throttle): admitted once the bucket refills; the tokens are taken
      -- now, as a debt the requests after it wait behind.
      local owed = credit - need
      return true, 0, need - credit, cap - owed, function() bucket_store(key, owed, now, p) end
    end
    return false, math.max(0, idiv(credit, E)), need - credit, cap - credit, nil
  end
  local left = credit - need
  local commit = function() bucket_store(key, left, now, p) end
  -- A probe records nothing: the reset is the state's as it stands.
  return true, idiv(left, E), 0, p.probe and cap - credit or cap - left, commit
end

-- Puts `cost` tokens back, up to the capacity (Cluster: another slot denied the request).
local function token_bucket_refund(key, now, p)
  local credit = bucket_credit(key, now, p)
  if credit == nil then return end
  credit = math.min(p.burst * p.emission, credit + p.cost * p.emission)
  if credit >= p.burst * p.emission then
    redis.call('DEL', key)
  else
    bucket_store(key, credit, now, p)
  end
end

-- Takes `cost` more tokens whatever is left (a cost reported after the response); the bucket
-- empties and keeps no debt beyond empty.
local function token_bucket_charge(key, now, p)
  local credit = bucket_credit(key, now, p) or p.burst * p.emission
  -- A throttled waiter's debt stays as it is.
  bucket_store(key, math.max(math.min(credit, 0), credit - p.cost * p.emission), now, p)
end
