-- The breaker index: one global hash naming every breaker not CLOSED and
-- every override, which every instance polls (every 500 ms) to see within
-- 2 s what the others tripped, closed or forced.
--
-- Fields (domain::keys): 't' .. len(m) .. ':' .. m .. c a trip, value
-- "T calls failures" (OPEN until T, HALF-OPEN until T + half_ms);
-- 'o' .. len(m) .. ':' .. m .. c an override, value "<until_ms> <kind>"
-- (kind open or closed); a named tenant's fields are the same after
-- '@' .. len(tenant) .. ':' .. tenant. An entry lives until it is no longer of use:
-- a trip until T + half_ms, an override until until_ms. The key's TTL is
-- always at least the longest remaining lifetime (a trip's capped by
-- cap_ms), so no entry outlives its use by much and the key never lives
-- without a TTL.
--
-- KEYS[1]  the index (sticky_brk_i)
-- ARGV[1]  op:
--   set  field value lifetime_ms: HSET, and the TTL at least lifetime_ms.
--        Returns {1}, or {-2} with nothing written when the index is new
--        and the service's Redis user may not PEXPIRE it.
--   del  field expect_value_prefix ('' = any value): HDEL the field if
--        its value starts with the prefix. Returns {1} deleted, {0} not.
--   poll now half_ms cap_ms: deletes the entries past their lifetime and
--        sets the TTL to the longest remaining one (a trip's
--        min(T + half_ms - now, cap_ms), an override's until_ms - now).
--        Returns the entries left, flat: field, value, field, value...
--        A value it cannot read is left alone and not returned (another
--        version may write it); it lives as long as the key.
local key, op = KEYS[1], ARGV[1]

-- The leading whole number of an entry's value: T or until_ms.
local function lifetime_end(value)
  if #value > 64 then return nil end
  local first = string.match(value, '^(%-?%d+) ')
  return first and tonumber(first)
end

-- An entry's kind, 't' or 'o': a named tenant's field starts with
-- '@' .. len(tenant) .. ':' .. tenant (domain::keys), and its kind follows.
local function kind_of(field)
  if string.sub(field, 1, 1) ~= '@' then return string.sub(field, 1, 1) end
  local len, after = string.match(field, '^@(%d+):()')
  if not len then return nil end
  local at = after + tonumber(len)
  return string.sub(field, at, at)
end

if op == 'set' then
  local field, value, lifetime = ARGV[2], ARGV[3], tonumber(ARGV[4])
  local pttl = redis.call('PTTL', key)
  if pttl == -2 and redis.acl_check_cmd
      and not redis.acl_check_cmd('PEXPIRE', key, string.format('%d', lifetime)) then
    return {-2}
  end
  redis.call('HSET', key, field, value)
  if pttl < lifetime then
    redis.call('PEXPIRE', key, string.format('%d', lifetime))
  end
  return {1}
elseif op == 'del' then
  local field, prefix = ARGV[2], ARGV[3]
  local value = redis.call('HGET', key, field)
  if value and string.sub(value, 1, #prefix) == prefix then
    redis.call('HDEL', key, field)
    return {1}
  end
  return {0}
elseif op == 'poll' then
  local now, half, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local flat = redis.call('HGETALL', key)
  local kept, expired, longest = {}, {}, 0
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    local kind, ends = kind_of(field), lifetime_end(value)
    local left
    if ends and kind == 't' then
      left = math.min(ends + half - now, cap)
    elseif ends and kind == 'o' then
      left = ends - now
    end
    if left and left <= 0 then
      expired[#expired + 1] = field
    elseif left then
      kept[#kept + 1] = field
      kept[#kept + 1] = value
      longest = math.max(longest, left)
    end
  end
  local from = 1
  while from <= #expired do
    local to = math.min(from + 999, #expired)
    redis.call('HDEL', key, unpack(expired, from, to))
    from = to + 1
  end
  if longest > 0 then
    redis.call('PEXPIRE', key, string.format('%d', longest))
  elseif #flat > 0 and redis.call('PTTL', key) == -1 then
    -- Only values it cannot read are left: they still get a TTL.
    redis.call('PEXPIRE', key, string.format('%d', cap))
  end
  return kept
end
return redis.error_reply('breaker_index: unknown op ' .. tostring(op))
