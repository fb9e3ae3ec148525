-- Adds one instance's pending experiment counts of one merchant and one UTC
-- day into the day's hash: the background flush of the experiment engine
-- (src/experiment/), one call per (merchant, day). Atomic on one key, so
-- concurrent instances never lose a count.
-- Every check comes before the first write: a stored value this service
-- does not write stops the script with nothing written, and so does a new
-- hash it could not give its TTL.
--
-- KEYS[1]  the experiment hash (sticky_exp_{M}_{YYYYMMDD})
-- ARGV[1]  the retention in ms (the hash's TTL, set by every call)
-- then field, count pairs (fields as domain::keys::EXPERIMENT_FIELDS, counts
-- whole and positive)
-- Returns {1}; or, with nothing written, {-1} when a stored value of a given
-- field is not a whole number, and {-2} when the service's Redis user may
-- not PEXPIRE the hash (a new one would be left without a TTL).
local key = KEYS[1]
local retention = ARGV[1]

local fields = {}
for at = 2, #ARGV, 2 do
  fields[#fields + 1] = ARGV[at]
end
if #fields == 0 then return {1} end

local stored = redis.call('HMGET', key, unpack(fields))
for i = 1, #fields do
  if stored[i] and not (#stored[i] <= 20 and string.match(stored[i], '^%d+$')) then
    return {-1}
  end
end
-- Checked on every call, not only for a new hash: the PEXPIRE below must
-- never fail after the counts were added.
if redis.acl_check_cmd and not redis.acl_check_cmd('PEXPIRE', key, retention) then
  return {-2}
end

for at = 2, #ARGV, 2 do
  redis.call('HINCRBY', key, ARGV[at], ARGV[at + 1])
end
redis.call('PEXPIRE', key, retention)
return {1}
