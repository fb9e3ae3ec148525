-- A write of one entry of a shard's breaker index (its layout:
-- breaker_common.lua): an override set or cleared by SetConnectorOverride.
-- Trips are written by breaker_transition.lua, and the index is polled by
-- breaker_flush.lua.
--
-- KEYS[1]  the shard's index (sticky_brk_i{S})
-- ARGV[1]  op:
--   set  field value lifetime_ms: HSET, and the TTL at least lifetime_ms.
--        Returns {1}, or {-2} with nothing written when the index is new
--        and the service's Redis user may not PEXPIRE it.
--   del  field expect_value_prefix ('' = any value): HDEL the field if
--        its value starts with the prefix. Returns {1} deleted, {0} not.
local key, op = KEYS[1], ARGV[1]

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
end
return redis.error_reply('breaker_index: unknown op ' .. tostring(op))
