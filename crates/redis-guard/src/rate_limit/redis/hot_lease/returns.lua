-- give_back(): the units of a block (reserve.lua) that its replica did not admit go back when
-- its lease ends: the TAT moves back by u emission intervals, exactly as if they had never been
-- taken.
--
-- That is exact only if no request since the reservation found the TAT in the past (GCRA then
-- restarts from now, and the units have already come back with time). Let floor = TAT - open
-- units × emission: reservations leave it as it is, admissions raise it, a give-back of u of a
-- block of g raises it by (g - u) × emission, so it never falls. While it stays at or above
-- now, so does the TAT with every block's unused units taken out: the state has never been
-- restarted, for this block or any other. So the units are given back only when the floor the
-- reservation reported is still at or after now; otherwise they stay used (a lost return errs
-- on limiting). The open count goes down by the whole block in both cases.
--
-- state, open: the keys (GCRA state, open-block count); em the emission interval (µs); g the
-- block, u its unused units (u <= g); floor and at the reservation's floor and Redis time (µs);
-- ttl the open count's TTL (ms). Returns the units given back.

-- The TAT stored in `v` (both scripts' forms: "<TAT>" or "<TAT>:<emission>"), or nil.
local function lease_tat(v)
  return v and (tonumber(v) or tonumber(string.match(v, '^(%d+):%d+$')))
end

local function give_back(state, open, now, em, g, u, floor, at, ttl)
  -- Past half the count's TTL, the count may have expired and been started afresh without this
  -- block: leave it (and the units) alone.
  if now - at > ttl * 500 then return 0 end
  local n = (tonumber(redis.call('GET', open)) or 0) - g
  if n > 0 then
    redis.call('SET', open, string.format('%.0f', n), 'KEEPTTL')
  else
    redis.call('DEL', open)
  end
  if u <= 0 or floor < now then return 0 end
  local tat = lease_tat(redis.call('GET', state))
  if not tat or tat <= now then return 0 end
  local new_tat = tat - u * em
  if new_tat <= now then
    redis.call('DEL', state)
  else
    redis.call('SET', state, string.format('%.0f', new_tat), 'PX', cdiv(new_tat - now, 1000))
  end
  return u
end
