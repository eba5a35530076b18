-- Decide and record requests against the rules of a layer, each request all or nothing.
--
-- Built by concatenation: backend/prelude.lua, overrides.lua, prelude.lua, the algorithm
-- files, a table `algorithms` mapping ids to their functions, then live.lua and this file.
--
-- Coalesced form (backend/coalesce.rs): one call carries one or more requests ("entries"),
-- decided one after the other, in order, at one Redis time.
--
-- KEYS     every entry's keys, entry after entry: per rule its state key, then its override
--          key when the rule reads one (operations.rs), then its live record when its spec is
--          marked `L` (live.lua; never on a Cluster); on a Redis Cluster all keys of one call
--          share a hash tag.
-- ARGV[1]  a time shift in µs added to Redis TIME: 0 in production; tests move time forward
--          with it instead of sleeping.
-- ARGV[2]  the number of entries
-- ARGV     then per entry: its key count, its argument count (2 + 8n), then its arguments:
--            a request id, unique per evaluation (the sliding log names its members with it);
--            1 for a dry run: decide, record nothing (used on a Cluster for the rules after one
--              that denied, and by inspect), else 0;
--            8 per rule, in order: algorithm id, limit, period (µs), burst, emission interval
--              (µs), cost (integers; 0: a probe, decided as 1 with `p.probe` set, never recorded;
--              the algorithm reports the reset of the state as it stands), then `0` (the rule reads no override record), `1` (it
--              does) or its bans `after:within:block:max:forget` (µs; it does), then the
--              throttle's max wait in µs (Rule::throttle; 0: none): a rule that would admit the
--              request after a wait of at most that admits it now, its future slot recorded
--              (`p.max_wait`, read by gcra.lua and token_bucket.lua only)
-- Overrides A rule's override record applies after its algorithm: on the runtime allow list the
--          rule admits and records nothing (remaining: what was left before the request); blocked, it denies (remaining 0, retry_after the
--          block's rest); else, when the algorithm denies a rule with bans (not in a dry run),
--          the rejection is counted and may start a ban, which applies to this request.
-- Clock    Redis TIME (+ shift), in microseconds; the caller's clock never enters a decision.
-- Reply    one array per entry: five integers per rule, in KEYS order,
--            allowed (1/0), limit, remaining, retry_after_ms, reset_after_ms (an admitted
--            rule's retry_after_ms > 0: admitted after that wait, Rule::throttle),
--          then the time of the decision (Redis TIME + shift, µs), which a refund passes back,
--          then five integers per rule that read its live record, in order: the record's
--          version (0: none), its mode (0 none, 1 enforce, 2 shadow, 3 soft; live.lua), and
--          its quota's limit, period (µs) and burst (0 0 0: none, the rule was decided with
--          its arguments' quota).
--          Milliseconds are rounded up. When any rule denies, nothing is recorded for any rule
--          of the entry. An entry that fails (an algorithm breaking its contract, a key of
--          another type) gets the error's text instead, and the others stand.
-- The rule, argument and key counts of entry e, whose header follows ARGV[a] with k keys used
-- before it; or nil and an error reply when it does not fit.
local function entry_counts(e, k, a)
  local n, m = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local r = m and (m - 2) / 8
  -- Up to 3 keys per rule: a live rule's record is the third (live.lua).
  if n == nil or r == nil or r ~= math.floor(r) or n < r or n > 3 * r or k + n > #KEYS
    or a + 2 + m > #ARGV then
    return nil, redis.error_reply('RG_ARITY entry ' .. e .. ' does not fit: ' .. tostring(n)
      .. ' keys, ' .. tostring(m) .. ' arguments')
  end
  return r, m, n
end

local now = clock()
-- Override records read by this call (false: none), and those to write at the end.
local ovs, ov_dirty = {}, {}

-- Decides the entry with n rules, keys from KEYS[k + 1] and arguments from ARGV[a + 1].
local function decide(k, n, a)
  local req, dry = ARGV[a + 1], ARGV[a + 2] == '1'
  local replies, commits, all_allowed = {}, {}, true
  -- Per rule that read its live record: its version, mode and quota, for the reply's tail.
  local seen = {}
  for i = 1, n do
    local o = a + 2 + (i - 1) * 8
    local p = params(o, req)
    -- Cost 0 is a probe: would one unit be admitted? Decided as cost 1, recorded never.
    local probe = p.cost == 0
    if probe then p.cost, p.probe = 1, true end
    -- A throttled rule may admit with a wait (its slot reserved); never a probe or a dry run,
    -- which record nothing to wait for.
    p.max_wait = (probe or dry) and 0 or (tonumber(ARGV[o + 8]) or 0)
    local spec, key, okey = ARGV[o + 7], KEYS[k + 1], nil
    -- A live rule (live.lua): its spec is marked, its live record is its last key.
    local live
    spec, live = live_spec(spec)
    if spec == '0' then
      k = k + 1
    else
      okey, k = KEYS[k + 2], k + 2
    end
    if live then
      local r, at = live_apply(p, KEYS[k + 1]), #seen
      seen[at + 1], seen[at + 2], seen[at + 3] = r[1], r[2], r[3]
      seen[at + 4], seen[at + 5] = r[4], r[5]
      k = k + 1
    end
    local algorithm = algorithms[p.id]
    if type(algorithm) ~= 'function' then
      if names[p.id] then
        return 'RG_ALGORITHM custom algorithm ' .. names[p.id]
          .. ' is not a function: its source must `return function(key, now, p) ... end`'
      end
      return 'RG_ALGORITHM unknown algorithm id ' .. tostring(p.id)
    end
    local allowed, remaining, retry_us, reset_us, commit = algorithm(key, now, p)
    local bad = check_reply(allowed, remaining, retry_us, reset_us, commit)
    if bad then
      return 'RG_ALGORITHM algorithm ' .. (names[p.id] or tostring(p.id)) .. ' ' .. bad
    end
    -- Only a throttled rule admits with a wait: another's retry_after is 0 once admitted.
    if allowed and p.max_wait == 0 then retry_us = 0 end
    local ov, wait = false, 0
    if okey then
      ov = ovs[okey]
      if ov == nil then
        ov = ov_parse(redis.call('GET', okey), now)
        ovs[okey] = ov
      end
      wait = ov_wait(ov, now)
    end
    if not allowed and wait == 0 and not dry and okey and spec ~= '1' then
      ov = ov_strike(ov, now, spec)
      ovs[okey], ov_dirty[okey] = ov, true
      wait = ov_wait(ov, now)
    end
    if probe and allowed and wait == 0 then
      remaining, commit = remaining + 1, nil
    end
    if wait < 0 then
      -- Not counted: what is left is what was left before the request.
      if allowed then remaining = remaining + p.cost end
      allowed, retry_us, commit = true, 0, nil
    elseif wait > 0 then
      allowed, remaining, retry_us, commit = false, 0, wait, nil
      if reset_us < wait then reset_us = wait end
    end
    if allowed then
      commits[#commits + 1] = commit
    else
      all_allowed = false
    end
    local r = (i - 1) * 5
    replies[r + 1], replies[r + 2], replies[r + 3] = allowed and 1 or 0, p.limit, remaining
    replies[r + 4], replies[r + 5] = cdiv(retry_us, 1000), cdiv(reset_us, 1000)
  end
  if all_allowed and not dry then
    for _, commit in ipairs(commits) do commit() end
  end
  replies[n * 5 + 1] = now
  for i = 1, #seen do replies[n * 5 + 1 + i] = seen[i] end
  return replies
end

local count = tonumber(ARGV[2]) or -1
local out, k, a = {}, 0, 2
for e = 1, count do
  local n, m, nk = entry_counts(e, k, a)
  if n == nil then return m end
  a = a + 2
  local ok, reply = pcall(decide, k, n, a)
  if ok then
    out[e] = reply
  else
    out[e] = type(reply) == 'table' and reply.err or ('ERR ' .. tostring(reply))
  end
  k, a = k + nk, a + m
end
if count < 0 or k ~= #KEYS or a ~= #ARGV then
  return redis.error_reply('RG_ARITY expected ' .. tostring(ARGV[2]) .. ' entries to use '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments; they use ' .. k .. ' and ' .. a)
end
for okey in pairs(ov_dirty) do ov_write(okey, ovs[okey], now) end
return out
