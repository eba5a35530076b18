-- Override records (rate_limit/limiter/overrides.rs): per rule and key, one string key in the rule's
-- hash tag holding `block_until:allow_until:level:level_until:strikes:strikes_until` (µs of
-- Redis time, 0 = none), with a PX expiry at the latest of them. Written by the operations
-- script (penalize, allow, reset) and by escalating bans; read by the evaluation script.
-- A value not in this form counts as no record. After backend/prelude.lua.

-- The record from a GET reply `v`, as of `now` (fields whose time has passed cleared), or false.
local function ov_parse(v, now)
  if not v then return false end
  local b, al, l, lu, s, su = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)$')
  if not b then return false end
  local r = { b = tonumber(b), a = tonumber(al), l = tonumber(l), lu = tonumber(lu),
    s = tonumber(s), su = tonumber(su) }
  if r.b <= now then r.b = 0 end
  if r.a <= now then r.a = 0 end
  if r.lu <= now then r.l, r.lu = 0, 0 end
  if r.su <= now then r.s, r.su = 0, 0 end
  return r
end

-- What record `r` does to a request at `now`: -1 admitted without counting (runtime allow
-- list), a positive wait in µs (blocked), or 0 (the rule decides).
local function ov_wait(r, now)
  if not r then return 0 end
  if r.a > now then return -1 end
  if r.b > now then return r.b - now end
  return 0
end

-- Counts one rejection at `now` under the bans `spec` (`after:within:block:max:forget`, µs);
-- the after-th in the window bans: block × 2^(level-1), at most max. Returns the record.
local function ov_strike(r, now, spec)
  local after, within, block, max, forget =
    string.match(spec, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
  if not after then error('RG_ARGUMENT bans must be after:within:block:max:forget, got ' .. spec) end
  after, within, block = tonumber(after), tonumber(within), tonumber(block)
  max, forget = tonumber(max), tonumber(forget)
  if not r then r = { b = 0, a = 0, l = 0, lu = 0, s = 0, su = 0 } end
  if r.su <= now then r.s, r.su = 0, now + within end
  r.s = r.s + 1
  if r.s >= after then
    r.l = r.l + 1
    local d = max
    if r.l <= 40 then d = math.min(block * 2 ^ (r.l - 1), max) end
    r.b = now + d
    r.lu = r.b + forget
    r.s, r.su = 0, 0
  end
  return r
end

-- Stores record `r` under `key` until its latest deadline, or deletes it when none is left.
local function ov_write(key, r, now)
  local u = math.max(r.b, r.a, r.lu, r.su)
  if u <= now then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, fmt(r.b, r.a, r.l, r.lu, r.s, r.su), 'PX', cdiv(u - now, 1000))
end
