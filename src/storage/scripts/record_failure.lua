-- A gateway failure: decrement a present combo, floored at 0, deleting it at
-- 0; never create anything; remember the attempt, so that a repeat of it
-- writes nothing. Atomic, so concurrent writes can neither leave a zero or
-- negative count behind nor lose an update.
-- Mirrors domain::counts::after_failure and domain::attempts::Remembered
-- (held equal by src/storage/scripts/tests.rs).
--
-- Every check comes before the first write: a value that this service does
-- not write stops the script with nothing written.
--
-- KEYS[1]  the customer hash
-- ARGV[1]  the combo field        ARGV[2]  the key TTL in seconds
-- ARGV[3]  the attempt's 8-byte digest, or '' for none
-- ARGV[4]  optional: how many failures the call stands for (bulk import);
--          absent means 1, so RecordOutcome's calls are unchanged
-- ARGV[5]  optional (bulk import): the row's import mark, as in
--          record_success.lua. RecordOutcome sends none.
-- Returns {code, net count}, where code is
--   1  applied;
--   0  no such habit;
--   2  a repeat of a remembered attempt, or an import row the mark covers:
--      the net count is the combo's current count (0 when absent);
--  -1  a value under the key is not one this service writes.
-- Codes other than 1 mean nothing was written.
-- (attempts.lua comes first: ATTEMPTS, MARK, is_count, is_attempts,
-- mark_verdict, remembers, remember.)
local key, field, attempt = KEYS[1], ARGV[1], ARGV[3]
local times, row = tonumber(ARGV[4] or '1'), ARGV[5]

-- The mark is read on every call: a hash whose last combo goes must go
-- with all its bookkeeping, whoever deletes that combo.
local stored = redis.call('HMGET', key, ATTEMPTS, field, MARK)
local attempts, current, marked = stored[1], stored[2], stored[3]
if attempts and not is_attempts(attempts) then
  return {-1, 0}
end
if current and not is_count(current) then
  return {-1, 0}
end
local verdict = row and mark_verdict(marked, row)
if verdict == -1 then
  return {-1, 0}
end
if verdict == 2 or (attempt ~= '' and attempts and remembers(attempts, attempt)) then
  return {2, tonumber(current) or 0}
end
if not current then
  return {0, 0}
end

local count = 0
if tonumber(current) <= times then
  redis.call('HDEL', key, field)
else
  count = redis.call('HINCRBY', key, field, -times)
end
local bookkeeping = (attempts and 1 or 0) + (marked and 1 or 0)
if bookkeeping > 0 and redis.call('HLEN', key) == bookkeeping then
  -- The last combo went: the hash goes, and its attempts and mark with it.
  redis.call('DEL', key)
  return {1, count}
end
if redis.call('EXISTS', key) == 1 then
  if attempt ~= '' and row then
    redis.call('HSET', key, ATTEMPTS, remember(attempts, attempt), MARK, row)
  elseif attempt ~= '' then
    redis.call('HSET', key, ATTEMPTS, remember(attempts, attempt))
  elseif row then
    redis.call('HSET', key, MARK, row)
  end
  redis.call('EXPIRE', key, ARGV[2])
end
return {1, count}
