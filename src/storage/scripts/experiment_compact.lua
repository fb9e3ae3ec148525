-- Adds one chunk of a batch of a shard's experiment counts log into the
-- day hashes: the log's compaction, driven by any instance, one chunk a
-- call (src/experiment/compact.rs). A batch is the log's first `frames`
-- frames, added up per merchant-day by the instance and split into
-- `chunks` chunks the same way by every instance (log.rs, `chunk_of`).
-- The meta hash says which chunk is next: a call adds its chunk only when
-- it is that one, so each chunk is added once, whichever instance sends
-- it and however often. The last chunk drops the batch's frames.
--
-- KEYS[1] the log, KEYS[2] its meta hash, KEYS[3..] the chunk's day
--         hashes (sticky_exp_{S}M_YYYYMMDD), one slot
-- ARGV[1] the batch's number (for chunk 0: one more than the last batch)
-- ARGV[2] its frames, ARGV[3] its chunks, ARGV[4] this call's chunk
-- ARGV[5] the retention in ms (each written key's TTL)
-- ARGV[6] now, Unix ms
-- then per hash, in KEYS' order: its number of fields, then field, count
-- pairs (fields as domain::keys::EXPERIMENT_FIELDS, counts whole and
-- positive)
-- Returns {answer, log_state()..., then per hash 1, or -1 (nothing of it
-- written) when a stored value of a given field is not a whole number}.
-- answer 1: added; 0: not this chunk's turn (added already, or another
-- batch), nothing written; -2: the service's Redis user may not run one
-- of the writes, nothing written.
local log, meta = KEYS[1], KEYS[2]
local batch, frames = tonumber(ARGV[1]), tonumber(ARGV[2])
local chunks, chunk = tonumber(ARGV[3]), tonumber(ARGV[4])
local retention, now = ARGV[5], ARGV[6]

local function answer(code, replies)
  local reply = {code}
  for _, n in ipairs(log_state(log, meta)) do reply[#reply + 1] = n end
  for _, r in ipairs(replies or {}) do reply[#reply + 1] = r end
  return reply
end

local m = redis.call('HMGET', meta, 'batch', 'frames', 'chunks', 'next')
local last = tonumber(m[1]) or 0
local turn
if m[2] then
  turn = batch == last and frames == tonumber(m[2]) and chunks == tonumber(m[3])
    and chunk == tonumber(m[4])
else
  turn = chunk == 0 and batch == last + 1 and frames >= 1 and chunks >= 1
    and redis.call('LLEN', log) >= frames
end
if not turn then return answer(0) end
-- Every kind of write is checked before the first: a refusal after the
-- batch moved on, or before its frames were dropped, would add a chunk
-- twice. (The day hashes share one key pattern; the first stands for all.)
if redis.acl_check_cmd then
  local hash = KEYS[3] or meta
  local allowed = redis.acl_check_cmd('HSET', meta, 'batch', '1')
    and redis.acl_check_cmd('HDEL', meta, 'frames')
    and redis.acl_check_cmd('LTRIM', log, '0', '-1')
    and redis.acl_check_cmd('PEXPIRE', meta, retention)
    and redis.acl_check_cmd('HMGET', hash, 'f')
    and redis.acl_check_cmd('HINCRBY', hash, 'f', '1')
    and redis.acl_check_cmd('PEXPIRE', hash, retention)
  if not allowed then return answer(-2) end
end

-- The batch moves on first: a refusal of this first write (OOM) leaves
-- nothing written, to be sent again; past it, no hash's refusal is raised
-- (it is that hash's -1), so no call ever stops half written and a chunk
-- is never added twice.
local pushed = redis.call('LLEN', log)
if chunk + 1 >= chunks then
  redis.call('HSET', meta, 'batch', batch)
  redis.call('HDEL', meta, 'frames', 'chunks', 'next')
  redis.call('LTRIM', log, frames, -1)
else
  redis.call('HSET', meta, 'batch', batch, 'frames', frames, 'chunks', chunks,
    'next', chunk + 1)
end
if chunk == 0 then
  -- The frames pushed after the batch's are the unbatched ones now.
  if pushed > frames then
    redis.call('HSET', meta, 'since', now)
  else
    redis.call('HDEL', meta, 'since')
  end
end
redis.call('PEXPIRE', meta, retention)

local function whole(stored)
  return #stored <= 20 and string.match(stored, '^%d+$')
end

-- One hash's counts: 1, or -1 with nothing of it written when a stored
-- value of its fields is not a whole number, the key is not a hash, or
-- Redis refused the write.
local function add(key, from, n)
  if n == 0 then return 1 end
  -- Several fields are all checked before any is added. One field is
  -- checked by its own HINCRBY, which writes nothing when it fails.
  if n > 1 then
    local fields = {}
    for i = 0, n - 1 do
      fields[#fields + 1] = ARGV[from + 2 * i]
    end
    local stored = redis.pcall('HMGET', key, unpack(fields))
    if stored.err then return -1 end
    for i = 1, n do
      if stored[i] and not whole(stored[i]) then return -1 end
    end
  end
  for i = 0, n - 1 do
    local added = redis.pcall('HINCRBY', key, ARGV[from + 2 * i], ARGV[from + 2 * i + 1])
    if type(added) == 'table' and added.err then return -1 end
  end
  redis.pcall('PEXPIRE', key, retention)
  return 1
end

local replies, at = {}, 7
for k = 3, #KEYS do
  local n = tonumber(ARGV[at])
  replies[#replies + 1] = add(KEYS[k], at + 1, n)
  at = at + 1 + 2 * n
end
return answer(1, replies)
