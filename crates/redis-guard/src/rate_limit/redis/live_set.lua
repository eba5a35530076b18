-- Sets or clears a rule's live quota (limiter/live.rs), one version above the last.
--
-- KEYS[1]  the rule's live record: "<version>:<limit>:<period µs>:<burst>:<emission µs>", or
--          "<version>" once cleared
-- ARGV[1]  the time shift (unused: the record holds no time)
-- ARGV[2]  "<limit>:<period µs>:<burst>:<emission µs>", or empty to clear
-- ARGV[3]  the record's TTL in ms (renewed by every change)
-- Reply    { the record before (empty: none), the new version }
local old = redis.call('GET', KEYS[1]) or ''
local version = (tonumber(string.match(old, '^(%d+)')) or 0) + 1
local v = string.format('%d', version)
if ARGV[2] ~= '' then v = v .. ':' .. ARGV[2] end
redis.call('SET', KEYS[1], v, 'PX', ARGV[3])
return { old, version }
