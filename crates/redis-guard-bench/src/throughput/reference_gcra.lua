-- The yardstick of `bench --scripts`: the least a GCRA decision can do in Redis, one decision
-- per key, with none of redis-guard's options (cost, overrides, bans, dry runs, headers).
--
-- KEYS     one state key per decision (its TAT, µs)
-- ARGV[1]  the emission interval, µs
-- ARGV[2]  the burst tolerance, µs: how far ahead of now the TAT may run
-- Reply    per key, 1 admitted (and recorded) or 0 denied
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  local tat = math.max(tonumber(redis.call('GET', key)) or now, now)
  if tat - now > tolerance then
    out[i] = 0
  else
    tat = tat + interval
    redis.call('SET', key, string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
    out[i] = 1
  end
end
return out
