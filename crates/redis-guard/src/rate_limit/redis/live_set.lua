-- Sets or clears one part of a rule's live record (limiter/live.rs), one version above the
-- last, keeping the other part.
--
-- KEYS[1]  the rule's live record: "<version>[:<limit>:<period µs>:<burst>:<emission µs>]
--          [;<mode>]"
-- ARGV[1]  the time shift (unused: the record holds no time)
-- ARGV[2]  the part: "q" (the quota) or "m" (the mode)
-- ARGV[3]  its value: "<limit>:<period µs>:<burst>:<emission µs>" or a mode's name; empty to
--          clear it
-- ARGV[4]  the record's TTL in ms (renewed by every change)
-- Reply    { the record before (empty: none), the new version }
local old = redis.call('GET', KEYS[1]) or ''
-- A value that is no record (written by hand, or a version past 2^53) keeps nothing.
local version = tonumber(string.match(old, '^(%d+)'))
local quota, mode = string.match(old, '^%d+:(%d+:%d+:%d+:%d+)'), string.match(old, ';(%a+)$')
if not version or version >= 9007199254740991 then version, quota, mode = 0, nil, nil end
version = version + 1
if ARGV[2] == 'q' then quota = ARGV[3] else mode = ARGV[3] end
local v = string.format('%d', version)
if quota and quota ~= '' then v = v .. ':' .. quota end
if mode and mode ~= '' then v = v .. ';' .. mode end
redis.call('SET', KEYS[1], v, 'PX', ARGV[4])
return { old, version }
