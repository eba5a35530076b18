-- Concurrency leases for one rule: at most `limit` requests of a key in flight at once.
--
-- State: one sorted set; a member per lease held, named by the request id (`p.req`), scored by
-- the lease's expiry (µs of Redis time). A lease ends when its request's response ends (the
-- release runs the refund below), or at its expiry, when the replica that held it crashed. The
-- key lives as long as its latest lease (PEXPIRE on every write). Each call trims the expired
-- leases (bounded: the set never holds more than `limit` live members) and counts.
-- `p.period` is the lease expiry; the cost is 1 (0: a probe, decided as 1 and never recorded).
--
-- Denied: retry_after is the time to the earliest expiry, at most a second (Rule::concurrency
-- says why). reset_after is the time to the latest expiry: by then every lease held now is
-- gone, released or not.
-- concurrency(key, now, p) returns allowed, remaining, retry_after_us, reset_after_us, commit.
local function concurrency(key, now, p)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
  local count = redis.call('ZCARD', key)
  if count + p.cost > p.limit then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local retry, reset = 1000000, p.period
    if first[2] then retry = math.min(retry, tonumber(first[2]) - now) end
    if last[2] then reset = tonumber(last[2]) - now end
    local remaining = p.limit - count
    if remaining < 0 then remaining = 0 end
    return false, remaining, retry, reset, nil
  end
  local commit = function()
    redis.call('ZADD', key, fmt(now + p.period), p.req)
    redis.call('PEXPIRE', key, cdiv(p.period, 1000))
  end
  return true, p.limit - count - p.cost, 0, p.period, commit
end

-- Releases the lease of request `p.req`: its response ended, or (Cluster) another slot denied
-- the request.
local function concurrency_refund(key, now, p)
  redis.call('ZREM', key, p.req)
end

-- Moves the expiry of request `p.req`'s lease to `now + p.period`, if it still holds one (a
-- lease that expired, and was trimmed, stays lost). Returns 1 when renewed, else 0.
local function concurrency_renew(key, now, p)
  local expiry = tonumber(redis.call('ZSCORE', key, p.req))
  if expiry == nil or expiry <= now then return 0 end
  redis.call('ZADD', key, 'XX', fmt(now + p.period), p.req)
  redis.call('PEXPIRE', key, cdiv(p.period, 1000))
  return 1
end

-- A lease is one request in flight: nothing to charge after the response.
local concurrency_charge = nil
