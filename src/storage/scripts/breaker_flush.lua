-- One shard's tick of the breaker engine (src/breaker/): appends one
-- instance's CLOSED counts of every merchant of the shard to the shard's
-- counts log and reads back what every instance appended since this one
-- last read; adds the probes of HALF-OPEN breakers into their merchants'
-- counts hashes; and polls the shard's index. One call per shard per tick
-- (a few with many probing merchants), however many merchants have
-- counts: the background cost is bounded by the shards, not the
-- merchants. (breaker_common.lua comes first: the counts hash's layout,
-- the index's, and their helpers.)
--
-- Why a log (issue 41): a count added inside Redis costs a redis.call
-- (about 9,400 instructions each, `scripts/measure-tick-instructions.sh
-- --floors`), and at 100,000 merchants nearly every call is its
-- merchant's only one in a tick, so the tick cost Redis more than the
-- call itself. Appended as bytes, a count costs about a hundred; every
-- instance folds the log into its own windows (src/breaker/window.rs).
--
-- The counts log: one string per shard and bucket period
-- (sticky_brk_l{S}_<period>, domain::keys), a sequence of frames, each
-- a whole APPEND (so a reader never sees half of one): I4 body length,
-- then the body (codec.rs, `log_frames`, says its layout; this script
-- never reads it). A key lives log_ttl_ms from its last append: long
-- enough for its counts' window.
--
-- Per connector with probe counts, by the trip record t:<c> =
-- "T calls failures" of its merchant's counts hash:
--   HALF-OPEN (T <= now < T + half_ms): probe counts tagged T are added to
--     hc/hf; other probes are dropped.
--   timed out (now >= T + half_ms): t, hc, hf go, x = T; then as CLOSED.
--   CLOSED (no t): probe counts tagged U with (no x or U > x) and
--     U <= now < U + half_ms mean the trip record was lost with the hash
--     (it expired during a long OPEN): t = "U 0 0" is made again and they
--     are added. Otherwise they are dropped.
-- Every check of a merchant comes before its first write: a value this
-- service does not write stops that merchant's flush with nothing of it
-- written (the other merchants' go on).
--
-- KEYS[1]  the shard's index (sticky_brk_i{S})
-- KEYS[2 .. 1+L] the shard's log keys to read (L = ARGV[8])
-- KEYS[2+L ..] the counts hash of each merchant with probe counts
--   (sticky_brk_c{S}M)
-- ARGV[1]  now (ms)   ARGV[2..4] unused (the window's shape)
-- ARGV[5]  half_ms (2 x window: how long HALF-OPEN lasts)
-- ARGV[6]  cap_ms (the longest an index entry of a trip is kept)
-- ARGV[7]  the merchants' probe counts, packed (struct, little-endian; one
--   string, not an argument per number). Per merchant, in KEYS' order:
--   I2 its connectors, then per connector: I2 length and the bytes of c,
--   i8 probe_until, i8 probe_calls, i8 probe_failures
-- ARGV[8]  L   ARGV[9] the frames to append (may be empty)
-- ARGV[10] which log key (1..L) they go to; 0 for none
-- ARGV[11] log_ttl_ms   ARGV[12] the most bytes read from one log key
-- ARGV[13 .. 12+L] per log key, the offset this instance has read to
-- Returns {1, merchants, kept, events, logs}:
--   merchants: per merchant a string of i8s (little-endian): 1, then per
--     connector in order: T or 0, trip_calls, trip_failures, hc, hf; or,
--     with nothing of it written, -1 when a stored value is not one this
--     service writes, -2 when the hash is new and the service's Redis
--     user may not PEXPIRE it. A write sets the hash's TTL to
--     max(PTTL, half_ms).
--   kept, events: the index's poll (brk_poll in breaker_common.lua).
--   logs: per log key, its bytes from the offset given (after this
--     call's append), at most the most bytes given.
-- Or {-2} when the log key would be made and the user may not PEXPIRE it
-- (nothing written).
local index = KEYS[1]
local now, half, cap = tonumber(ARGV[1]), tonumber(ARGV[5]), tonumber(ARGV[6])
local logs_n, frames, append_to = tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10])
local log_ttl, read_most = tonumber(ARGV[11]), tonumber(ARGV[12])

-- One merchant's probe counts into its hash `key`; its reply.
local function flush_merchant(key, tallies)
  local pttl = redis.call('PTTL', key)

  -- First every read, check and decision; the writes are kept in order
  -- and made after.
  local hset, hdel, hincr = {}, {}, {}
  local reply = {struct.pack('<i8', 1)}
  for _, tally in ipairs(tallies) do
    local c = tally.c
    local stored = redis.call('HMGET', key, 't:' .. c, 'x:' .. c, 'hc:' .. c, 'hf:' .. c)
    local T, tc, tf
    if stored[1] then
      T, tc, tf = brk_triple(stored[1])
      if not T then return struct.pack('<i8', -1) end
    end
    local x = stored[2] and brk_whole(stored[2])
    local hc, hf = brk_whole(stored[3]), brk_whole(stored[4])
    if (stored[2] and not x) or not hc or not hf then return struct.pack('<i8', -1) end

    if T and now >= T + half then
      -- An undecided HALF-OPEN timed out: CLOSED again.
      hdel[#hdel + 1] = 't:' .. c
      hdel[#hdel + 1] = 'hc:' .. c
      hdel[#hdel + 1] = 'hf:' .. c
      hset[#hset + 1] = 'x:' .. c
      hset[#hset + 1] = brk_fmt(T)
      x, T, tc, tf, hc, hf = T, nil, nil, nil, 0, 0
    end
    local has_probes = tally.pu ~= 0 and (tally.pc > 0 or tally.pf > 0)
    if not T and has_probes and (not x or tally.pu > x)
        and tally.pu <= now and now < tally.pu + half then
      -- The trip record was lost with the hash: HALF-OPEN since pu.
      T, tc, tf, hc, hf = tally.pu, 0, 0, 0, 0
      hset[#hset + 1] = 't:' .. c
      hset[#hset + 1] = string.format('%d 0 0', T)
      hset[#hset + 1] = 'hc:' .. c
      hset[#hset + 1] = '0'
      hset[#hset + 1] = 'hf:' .. c
      hset[#hset + 1] = '0'
    end
    if T and now >= T and has_probes and tally.pu == T then
      hincr[#hincr + 1] = {'hc:' .. c, tally.pc}
      hincr[#hincr + 1] = {'hf:' .. c, tally.pf}
      hc, hf = hc + tally.pc, hf + tally.pf
    end
    reply[#reply + 1] = struct.pack('<i8i8i8i8i8', T or 0, tc or 0, tf or 0, hc, hf)
  end

  if #hset > 0 or #hincr > 0 then
    if not brk_may_create(key, pttl) then
      return struct.pack('<i8', -2)
    end
  end
  -- Deletions first, so a field both dropped and made again above (a timed
  -- out trip, then a lost one made again) ends as made.
  if #hdel > 0 then redis.call('HDEL', key, unpack(hdel)) end
  if #hset > 0 then redis.call('HSET', key, unpack(hset)) end
  for _, incr in ipairs(hincr) do
    redis.call('HINCRBY', key, incr[1], brk_fmt(incr[2]))
  end
  if #hset > 0 or #hincr > 0 or #hdel > 0 then
    brk_keep_ttl(key, half)
  end
  return table.concat(reply)
end

-- The counts log first: a refusal to make its key writes nothing at all.
if append_to > 0 and #frames > 0 then
  local log = KEYS[1 + append_to]
  if not brk_may_create(log, redis.call('PTTL', log)) then
    return {-2}
  end
  redis.call('APPEND', log, frames)
  redis.call('PEXPIRE', log, brk_fmt(log_ttl))
end
local logs = {}
for k = 1, logs_n do
  local from = tonumber(ARGV[12 + k])
  logs[k] = redis.call('GETRANGE', KEYS[1 + k], from, from + read_most - 1)
end

-- The merchants' probe counts, as sent, each flushed in turn.
local merchants, packed, at = {}, ARGV[7], 1
for m = 2 + logs_n, #KEYS do
  local tallies, connectors = {}, nil
  connectors, at = struct.unpack('<I2', packed, at)
  for _ = 1, connectors do
    local len, c
    len, at = struct.unpack('<I2', packed, at)
    c, at = string.sub(packed, at, at + len - 1), at + len
    local tally = {c = c}
    tally.pu, tally.pc, tally.pf, at = struct.unpack('<i8i8i8', packed, at)
    tallies[#tallies + 1] = tally
  end
  merchants[#merchants + 1] = flush_merchant(KEYS[m], tallies)
end

local kept, events = brk_poll(index, now, half, cap)
return {1, merchants, kept, events, logs}
