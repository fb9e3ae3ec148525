-- A gateway failure: decrement a present combo, floored at 0, deleting it at
-- 0; never create anything. Atomic, so concurrent writes can neither leave a
-- zero or negative count behind nor lose an update.
-- Mirrors domain::counts::after_failure (held equal by src/storage/scripts/tests.rs).
--
-- KEYS[1]  the customer hash
-- ARGV[1]  the combo field        ARGV[2]  the key TTL in seconds
-- Returns {applied (0|1), net count}. applied = 0: no such habit, nothing written.
local key, field = KEYS[1], ARGV[1]

local current = redis.call('HGET', key, field)
if not current then
  return {0, 0}
end

local count = 0
if tonumber(current) <= 1 then
  redis.call('HDEL', key, field)
else
  count = redis.call('HINCRBY', key, field, -1)
end
if redis.call('EXISTS', key) == 1 then
  redis.call('EXPIRE', key, ARGV[2])
end
return {1, count}
