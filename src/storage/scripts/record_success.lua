-- A success: HINCRBY the combo and re-arm the sliding TTL in one atomic step,
-- then, if the write created a new field past the cap, prune the excess.
-- Mirrors domain::prune::fields_to_prune (held equal by src/storage/scripts/tests.rs).
--
-- KEYS[1]  the customer hash
-- ARGV[1]  the combo field        ARGV[2]  the key TTL in seconds
-- ARGV[3]  the combo cap          ARGV[4]  '1' when the customer was admitted
--                                          (create the hash if absent)
-- Returns {applied (0|1), net count, pruned}. applied = 0 means the hash does
-- not exist and the customer must pass admission first; nothing was written.
local key, field, ttl, cap = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])

if ARGV[4] ~= '1' and redis.call('EXISTS', key) == 0 then
  return {0, 0, 0}
end

local created = redis.call('HEXISTS', key, field) == 0
local count = redis.call('HINCRBY', key, field, 1)
redis.call('EXPIRE', key, ttl)

local pruned = 0
if created then
  local excess = redis.call('HLEN', key) - cap
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
      if flat[i] ~= field then
        others[#others + 1] = {flat[i], tonumber(flat[i + 1])}
      end
    end
    table.sort(others, function(a, b)
      if a[2] ~= b[2] then return a[2] < b[2] end
      return bytes_less(a[1], b[1])
    end)
    for i = 1, excess do
      redis.call('HDEL', key, others[i][1])
      pruned = pruned + 1
    end
  end
end

return {1, count, pruned}
