-- Adds one instance's pending experiment counts of every merchant and UTC
-- day of one shard into the days' hashes: the background flush of the
-- experiment engine (src/experiment/), one call per shard per tick,
-- however many merchants have counts. Atomic on the shard's keys (one
-- Cluster slot, hash tag {S}), so concurrent instances never lose a count.
-- Every check of a hash comes before its first write: a stored value this
-- service does not write leaves that hash unwritten, and so does one it
-- could not give its TTL; the other hashes are written. (A hash given one
-- field is checked by its HINCRBY, which writes nothing when it fails.)
--
-- KEYS     the experiment hashes (sticky_exp_{S}M_YYYYMMDD)
-- ARGV[1]  the retention in ms (each hash's TTL, set by every call)
-- then per key, in KEYS' order: the number of its fields, then field,
-- count pairs (fields as domain::keys::EXPERIMENT_FIELDS, counts whole and
-- positive)
-- Returns one reply per key: 1, or, with nothing of it written, -1 when a
-- stored value of a given field is not a whole number, and -2 when the
-- service's Redis user may not PEXPIRE the hash (it would be left without
-- a TTL).
local retention = ARGV[1]

local function flush(key, from, n)
  if n == 0 then return 1 end
  -- Several fields are all checked before any is added. One field (a
  -- merchant-day's one outcome in a tick, what a platform's sparse calls
  -- send, issue 41) is checked by its own HINCRBY below, which writes
  -- nothing when it fails: no HMGET for it.
  if n > 1 then
    local fields = {}
    for i = 0, n - 1 do
      fields[#fields + 1] = ARGV[from + 2 * i]
    end
    local stored = redis.call('HMGET', key, unpack(fields))
    for i = 1, #fields do
      if stored[i] and not (#stored[i] <= 20 and string.match(stored[i], '^%d+$')) then
        return -1
      end
    end
  end
  -- Checked on every call, not only for a new hash: the PEXPIRE below must
  -- never fail after the counts were added.
  if redis.acl_check_cmd and not redis.acl_check_cmd('PEXPIRE', key, retention) then
    return -2
  end
  if n == 1 then
    -- Not a whole number (or past one): -1, nothing written. Any other
    -- refusal (WRONGTYPE, OOM) is raised, as the HMGET would raise it.
    local added = redis.pcall('HINCRBY', key, ARGV[from], ARGV[from + 1])
    if type(added) == 'table' and added.err then
      if string.find(added.err, 'not an integer', 1, true)
          or string.find(added.err, 'overflow', 1, true) then
        return -1
      end
      error(added)
    end
  else
    for i = 0, n - 1 do
      redis.call('HINCRBY', key, ARGV[from + 2 * i], ARGV[from + 2 * i + 1])
    end
  end
  redis.call('PEXPIRE', key, retention)
  return 1
end

local replies, at = {}, 2
for k = 1, #KEYS do
  local n = tonumber(ARGV[at])
  replies[k] = flush(KEYS[k], at + 1, n)
  at = at + 1 + 2 * n
end
return replies
