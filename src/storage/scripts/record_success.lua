-- A success: HINCRBY the combo and re-arm the sliding TTL in one atomic step;
-- if the write created a new field past the cap, prune the excess; remember
-- the attempt, so that a repeat of it writes nothing.
-- Mirrors domain::prune::fields_to_prune and domain::attempts::Remembered
-- (held equal by src/storage/scripts/tests.rs).
--
-- Every check comes before the first write: a value that this service does
-- not write (a non-integer count, a foreign attempts value) stops the script
-- with nothing written.
--
-- KEYS[1]  the customer hash
-- ARGV[1]  the combo field        ARGV[2]  the key TTL in seconds
-- ARGV[3]  the combo cap          ARGV[4]  '1' when the customer was admitted
--                                          (create the hash if absent)
-- ARGV[5]  the attempt's 8-byte digest, or '' for none
-- ARGV[6]  optional: how many successes the call stands for (bulk import);
--          absent means 1, so RecordOutcome's calls are unchanged
-- ARGV[7]  optional (bulk import): the row's import mark (the file's 8-byte
--          identity, then the row in decimal). A row the hash's mark covers
--          writes nothing (code 2); a row that writes moves the mark to it.
--          RecordOutcome sends none and never touches the mark.
-- Returns {code, net count, pruned}, where code is
--   1  applied;
--   0  the hash does not exist and the customer must pass admission first;
--   2  a repeat of a remembered attempt, or an import row the mark covers:
--      the net count is the combo's current count (0 when absent);
--  -1  a value under the key is not one this service writes;
--  -2  the hash is new and the service's Redis user may not EXPIRE it, so
--      it would be left without a TTL (Redis 7 and later check this; 6 has
--      no redis.acl_check_cmd).
-- Codes other than 1 mean nothing was written.
-- (attempts.lua comes first: ATTEMPTS, MARK, is_count, is_attempts,
-- mark_verdict, remembers, remember.)
local key, field, ttl, cap, attempt = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[5]
local times, row = tonumber(ARGV[6] or '1'), ARGV[7]

-- The mark is read only for an import row: RecordOutcome's reads are as
-- they were.
local stored
if row then
  stored = redis.call('HMGET', key, ATTEMPTS, field, MARK)
else
  stored = redis.call('HMGET', key, ATTEMPTS, field)
end
local attempts, current, marked = stored[1], stored[2], stored[3]
if not attempts and not current and ARGV[4] ~= '1' and redis.call('EXISTS', key) == 0 then
  return {0, 0, 0}
end

if attempts and not is_attempts(attempts) then
  return {-1, 0, 0}
end
if current and not is_count(current) then
  return {-1, 0, 0}
end
local verdict = row and mark_verdict(marked, row)
if verdict == -1 then
  return {-1, 0, 0}
end
if verdict == 2 or (attempt ~= '' and attempts and remembers(attempts, attempt)) then
  return {2, tonumber(current) or 0, 0}
end

-- The cap, chosen before any write: only a new field can push the hash past it.
local victims = {}
if not current then
  local fields = redis.call('HLEN', key)
  -- A new hash is written only if it can be given its TTL: a script that
  -- Redis stops at the EXPIRE, after the write, would leave it with none.
  -- (Not EXPIRE itself on the absent key: a write command would let the
  -- writes after it past maxmemory.)
  if fields == 0 and redis.acl_check_cmd and not redis.acl_check_cmd('EXPIRE', key, ttl) then
    return {-2, 0, 0}
  end
  -- HLEN less the attempts: exact, or one more than the combos when the hash
  -- holds an import mark, which the count below leaves out.
  local combos = fields - (attempts and 1 or 0)
  local excess = combos + 1 - cap
  if excess > 0 then
    -- Lua's '<' on strings follows the server's locale (strcoll); the rule
    -- says bytewise, so compare bytes.
    local function bytes_less(a, b)
      local n = math.min(#a, #b)
      for i = 1, n do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x < y end
      end
      return #a < #b
    end
    local flat = redis.call('HGETALL', key)
    local others = {}
    for i = 1, #flat, 2 do
      -- Bookkeeping (`:a`, `:i`: a name that starts with ':', as
      -- domain::attempts::is_bookkeeping says) is no combo.
      if string.byte(flat[i], 1) ~= 58 then
        if not is_count(flat[i + 1]) then
          return {-1, 0, 0}
        end
        others[#others + 1] = {flat[i], tonumber(flat[i + 1])}
      end
    end
    excess = #others + 1 - cap
    table.sort(others, function(a, b)
      if a[2] ~= b[2] then return a[2] < b[2] end
      return bytes_less(a[1], b[1])
    end)
    for i = 1, excess do
      victims[i] = others[i][1]
    end
  end
end

local count
if attempt == '' and not row then
  count = redis.call('HINCRBY', key, field, times)
elseif not row then
  -- The count and the attempt in one command: the count was read (and
  -- checked to be a whole number) above.
  count = (tonumber(current) or 0) + times
  redis.call('HSET', key, field, string.format('%d', count), ATTEMPTS, remember(attempts, attempt))
else
  -- An import row: the count, its attempt if any, and the mark, in one
  -- command.
  count = (tonumber(current) or 0) + times
  if attempt == '' then
    redis.call('HSET', key, field, string.format('%d', count), MARK, row)
  else
    redis.call('HSET', key, field, string.format('%d', count), ATTEMPTS, remember(attempts, attempt), MARK, row)
  end
end
for i = 1, #victims do
  redis.call('HDEL', key, victims[i])
end
redis.call('EXPIRE', key, ttl)
return {1, count, #victims}
