-- Calls per phone number with a daily cap, as a custom redis-guard algorithm:
-- at most p.limit calls per p.period window from one number (the window opens with the first
-- call), and at most p.burst calls per UTC day.
--
-- State: one hash per number: start, count (the window), day, daily (the day's count).
return function(key, now, p)
  local DAY = 86400000000
  local day = idiv(now, DAY)
  local v = redis.call('HMGET', key, 'start', 'count', 'day', 'daily')
  local start, count = tonumber(v[1]), tonumber(v[2]) or 0
  local daily = 0
  if tonumber(v[3]) == day then daily = tonumber(v[4]) or 0 end
  if start == nil or now >= start + p.period then start, count = now, 0 end
  local window_end = start + p.period
  local day_end = (day + 1) * DAY
  if daily + p.cost > p.burst then
    return false, 0, day_end - now, day_end - now, nil
  end
  if count + p.cost > p.limit then
    return false, p.limit - count, window_end - now, window_end - now, nil
  end
  local remaining = math.min(p.limit - count, p.burst - daily) - p.cost
  return true, remaining, 0, window_end - now, function()
    redis.call('HSET', key, 'start', fmt(start), 'count', count + p.cost,
      'day', fmt(day), 'daily', daily + p.cost)
    -- Expire with the day (plus the window, for a window that crosses midnight).
    redis.call('PEXPIRE', key, cdiv(math.max(day_end, window_end) - now, 1000))
  end
end
