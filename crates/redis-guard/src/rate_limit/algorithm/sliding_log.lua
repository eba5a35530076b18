-- Sliding-window log for one rule: exact; at most `limit` cost units in any span of `period`.
--
-- State: one sorted set; a member per admitted cost unit, scored by its time (µs). Members are
-- "<request id>:<n>" (n = 1..cost): unique, and removable by a refund.
-- Memory per key is O(limit). Each call trims entries older than the window (bounded: the set
-- never holds more than `limit` members) and reads one member by rank.
-- sliding_log(key, now, p) returns allowed, remaining, retry_after_us, reset_after_us, commit.
-- Logs `n` units at `now`, named "<request id><tag><n>", and renews the key's TTL.
local function sliding_log_add(key, now, p, n, tag)
  -- ZADD in batches: Lua's unpack has a small stack, and cost may be large.
  local i = 1
  while i <= n do
    local args = {}
    for j = i, math.min(i + 499, n) do
      args[#args + 1] = fmt(now)
      args[#args + 1] = p.req .. tag .. j
    end
    redis.call('ZADD', key, unpack(args))
    i = i + 500
  end
  redis.call('PEXPIRE', key, cdiv(p.period, 1000))
end

local function sliding_log(key, now, p)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - p.period))
  local count = redis.call('ZCARD', key)
  if count + p.cost > p.limit then
    -- Wait until enough of the oldest entries leave the window for `cost` more to fit.
    local k = count + p.cost - p.limit
    local oldest = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local retry = p.period
    if oldest[2] then retry = tonumber(oldest[2]) + p.period - now end
    local reset = p.period
    if newest[2] then reset = tonumber(newest[2]) + p.period - now end
    local remaining = p.limit - count
    if remaining < 0 then remaining = 0 end
    return false, remaining, retry, reset, nil
  end
  local commit = function() sliding_log_add(key, now, p, p.cost, ':') end
  local reset = p.period
  if p.probe then
    -- A probe records nothing: until the newest entry leaves (0 for an empty log).
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = newest[2] and tonumber(newest[2]) + p.period - now or 0
  end
  return true, p.limit - count - p.cost, 0, reset, commit
end

-- Gives back what request `p.req` took (Cluster: another slot denied the request).
local function sliding_log_refund(key, now, p)
  local i = 1
  while i <= p.cost do
    local members = {}
    for j = i, math.min(i + 499, p.cost) do members[#members + 1] = p.req .. ':' .. j end
    redis.call('ZREM', key, unpack(members))
    i = i + 500
  end
end

-- Logs `cost` more units now whatever is left (a cost reported after the response), at most
-- `limit` of them: a full log already keeps the key waiting a whole period, and more entries
-- would only cost memory. They are named "<request id>:+<n>".
local function sliding_log_charge(key, now, p)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - p.period))
  sliding_log_add(key, now, p, math.min(p.cost, p.limit), ':+')
end
