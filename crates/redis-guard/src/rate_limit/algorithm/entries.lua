-- The coalesced form of the evaluation scripts (backend/coalesce.rs): after the time shift,
-- ARGV[2] is the entry count, then each entry is its key count (2 per rule: the rule's state key,
-- then its override key), its argument count (2 + 7 per rule for a rate-limit request) and its
-- arguments; KEYS are the entries' keys, in order.

-- The rule and argument counts of entry e, whose header follows ARGV[a] with k keys used before
-- it; or nil and an error reply when it does not fit.
local function entry_counts(e, k, a)
  local n, m = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  if n == nil or n % 2 ~= 0 or m ~= 2 + n / 2 * 7 or k + n > #KEYS or a + 2 + m > #ARGV then
    return nil, redis.error_reply('RG_ARITY entry ' .. e .. ' does not fit: ' .. tostring(n)
      .. ' keys, ' .. tostring(m) .. ' arguments')
  end
  return n / 2, m
end

-- An error reply when `count` entries did not use exactly k keys and ARGV up to a; else nil.
local function entries_misfit(count, k, a)
  if count < 0 or k ~= #KEYS or a ~= #ARGV then
    return redis.error_reply('RG_ARITY expected ' .. tostring(ARGV[2]) .. ' entries to use '
      .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments; they use ' .. k .. ' and ' .. a)
  end
  return nil
end
