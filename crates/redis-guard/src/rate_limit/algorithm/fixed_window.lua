-- Fixed window for one rule: at most `limit` cost units per window; a window opens with the first
-- request after the previous one closed and lasts `period` (the usual INCR + EXPIRE on first
-- hit, done atomically, with the window start kept in the value so Redis TIME, not key expiry,
-- decides).
--
-- The shape of Redis < 7 and of shifted or frozen test clocks; on Redis >= 7 a fixed window is a
-- plain counter (fixed_window_counter.lua, fixed_window_plain.rs).
-- State: one string key "<window start µs>:<count>", expiring when the window closes.
-- fixed_window(key, now, p) returns allowed, remaining, retry_after_us, reset_after_us, commit.
-- A rejected request is not counted (unlike INCR + EXPIRE, which counts it) so that rules stay
-- all-or-nothing.
-- The open window's start and count at `key`: a new window at `now` when none is open.
local function fixed_window_open(key, now, p)
  local start, count = string.match(redis.call('GET', key) or '', '^(%d+):(%d+)$')
  start, count = tonumber(start), tonumber(count)
  if start == nil or now >= start + p.period or start > now then
    return now, 0
  end
  return start, count
end

local function fixed_window(key, now, p)
  local start, count = fixed_window_open(key, now, p)
  local window_end = start + p.period
  if count + p.cost > p.limit then
    local remaining = p.limit - count
    if remaining < 0 then remaining = 0 end
    return false, remaining, window_end - now, window_end - now, nil
  end
  local commit = function()
    redis.call('SET', key, fmt(start, count + p.cost), 'PX', cdiv(window_end - now, 1000))
  end
  -- A probe records nothing: a window that counts nothing has nothing to reset.
  local reset = (p.probe and count == 0) and 0 or window_end - now
  return true, p.limit - count - p.cost, 0, reset, commit
end

-- Uncounts `cost` in the window the request was counted in (Cluster: another slot denied the
-- request), if that window is still the open one. If it closed in the milliseconds since, or a
-- new window opened, there is nothing to give back: crediting the new window would admit more
-- than the limit in it.
local function fixed_window_refund(key, now, p)
  local start, count = string.match(redis.call('GET', key) or '', '^(%d+):(%d+)$')
  start, count = tonumber(start), tonumber(count)
  if start == nil or now >= start + p.period then return end
  if p.charged_at < start or p.charged_at >= start + p.period then return end
  redis.call('SET', key, fmt(start, math.max(0, count - p.cost)), 'KEEPTTL')
end

-- Counts `cost` more in the open window (a new one if none is open) whatever is left (a cost
-- reported after the response): the count may pass the limit until the window closes.
local function fixed_window_charge(key, now, p)
  local start, count = fixed_window_open(key, now, p)
  redis.call('SET', key, fmt(start, count + p.cost), 'PX', cdiv(start + p.period - now, 1000))
end
