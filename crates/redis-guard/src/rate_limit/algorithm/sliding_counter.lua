-- Sliding-window counter for one rule: O(1) approximation of the sliding log. Windows of
-- `period` are aligned to Redis TIME; the estimate is the current window's count plus the
-- previous window's count weighted by how much of it the sliding window still covers:
--   estimate = floor(previous * (period - elapsed) / period) + current
--
-- State: one string key "<window index>:<previous>:<current>", expiring two periods after the
-- window opened.
-- sliding_counter(key, now, p) returns allowed, remaining, retry_after_us, reset_after_us, commit.
-- The current window's index, how far into it `now` is, and the previous and current counts
-- stored at `key`.
local function sliding_counter_counts(key, now, P)
  local w = idiv(now, P)
  local sw, sprev, scur = string.match(redis.call('GET', key) or '', '^(%d+):(%d+):(%d+)$')
  sw, sprev, scur = tonumber(sw), tonumber(sprev), tonumber(scur)
  local prev, cur = 0, 0
  if sw == w then
    prev, cur = sprev, scur
  elseif sw == w - 1 then
    prev = scur
  end
  return w, now - w * P, prev, cur
end

local function sliding_counter(key, now, p)
  local P, L, C = p.period, p.limit, p.cost
  local w, elapsed, prev, cur = sliding_counter_counts(key, now, P)
  local estimate = idiv(prev * (P - elapsed), P) + cur
  if estimate + C > L then
    local retry
    if cur + C <= L then
      -- The previous window's weight must shrink to fit: prev * (P - e) <= (L - cur - C) * P.
      retry = P - idiv((L - cur - C) * P, prev) - elapsed
    else
      -- Only in the next window, once this one's weight shrinks: cur * (P - e) <= (L - C) * P.
      retry = (P - elapsed) + math.max(0, P - idiv((L - C) * P, cur))
    end
    if retry < 1 then retry = 1 end
    local reset = P - elapsed
    if cur > 0 then reset = reset + P end
    local remaining = L - estimate
    if remaining < 0 then remaining = 0 end
    return false, remaining, retry, reset, nil
  end
  local commit = function()
    redis.call('SET', key, fmt(w, prev, cur + C), 'PX', cdiv(2 * P - elapsed, 1000))
  end
  local reset = (P - elapsed) + P
  if p.probe then
    -- A probe records nothing: until both windows count nothing.
    if cur > 0 then reset = 2 * P - elapsed elseif prev > 0 then reset = P - elapsed else reset = 0 end
  end
  return true, L - estimate - C, 0, reset, commit
end

-- Uncounts `cost` from the window it was counted in (Cluster: another slot denied the
-- request): the current count when that window is still the stored one, the previous count when
-- the stored state has moved on by one window since, nothing when it moved further. Never from a
-- window the request was not counted in.
local function sliding_counter_refund(key, now, p)
  local sw, sprev, scur = string.match(redis.call('GET', key) or '', '^(%d+):(%d+):(%d+)$')
  sw, sprev, scur = tonumber(sw), tonumber(sprev), tonumber(scur)
  if sw == nil then return end
  local charged = idiv(p.charged_at, p.period)
  if sw == charged then
    scur = math.max(0, scur - p.cost)
  elseif sw == charged + 1 then
    sprev = math.max(0, sprev - p.cost)
  else
    return
  end
  redis.call('SET', key, fmt(sw, sprev, scur), 'KEEPTTL')
end

-- Counts `cost` more in the current window whatever is left (a cost reported after the
-- response).
local function sliding_counter_charge(key, now, p)
  local w, elapsed, prev, cur = sliding_counter_counts(key, now, p.period)
  redis.call('SET', key, fmt(w, prev, cur + p.cost), 'PX', cdiv(2 * p.period - elapsed, 1000))
end
