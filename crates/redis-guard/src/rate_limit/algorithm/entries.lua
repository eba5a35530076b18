-- The coalesced form of the evaluation scripts (backend/coalesce.rs): after the time shift,
-- ARGV[2] is the entry count, then each entry is its key count, its argument count (2 + 8 per
-- rule for a rate-limit request) and its arguments; KEYS are the entries' keys, in order: per
-- rule its state key, then its override key when the rule reads one (its 7th argument is not
-- `0`), so an entry of r rules has r to 2r keys.

-- The rule, argument and key counts of entry e, whose header follows ARGV[a] with k keys used
-- before it; or nil and an error reply when it does not fit. `num` converts ARGV's strings
-- (default `tonumber`).
local function entry_counts(e, k, a, num)
  num = num or tonumber
  local n, m = num(ARGV[a + 1]), num(ARGV[a + 2])
  local r = m and (m - 2) / 8
  -- Up to 3 keys per rule: a live rule's record is the third (live.lua).
  if n == nil or r == nil or r ~= math.floor(r) or n < r or n > 3 * r or k + n > #KEYS
    or a + 2 + m > #ARGV then
    return nil, redis.error_reply('RG_ARITY entry ' .. e .. ' does not fit: ' .. tostring(n)
      .. ' keys, ' .. tostring(m) .. ' arguments')
  end
  return r, m, n
end

-- An error reply when `count` entries did not use exactly k keys and ARGV up to a; else nil.
local function entries_misfit(count, k, a)
  if count < 0 or k ~= #KEYS or a ~= #ARGV then
    return redis.error_reply('RG_ARITY expected ' .. tostring(ARGV[2]) .. ' entries to use '
      .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments; they use ' .. k .. ' and ' .. a)
  end
  return nil
end
