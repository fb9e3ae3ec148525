-- One shard's tick of the breaker engine (src/breaker/): adds one
-- instance's pending counts of every merchant of the shard into their
-- counts hashes, answers each connector's shared counts, and polls the
-- shard's index. One call per shard per tick, however many merchants have
-- counts: the background cost is bounded by the shards, not the merchants.
-- Atomic on the shard's keys (one Cluster slot), so concurrent instances
-- never lose a count. (breaker_common.lua comes first: the counts hash's
-- layout, the index's, and their helpers.)
--
-- Per connector, by the trip record t:<c> = "T calls failures":
--   OPEN (now < T): every count is dropped (calls while OPEN count nowhere).
--   HALF-OPEN (T <= now < T + half_ms): probe counts tagged T are added to
--     hc/hf; other probes and every bucket count are dropped.
--   timed out (now >= T + half_ms): t, hc, hf go, x = T; then as CLOSED.
--   CLOSED (no t): probe counts tagged U with (no x or U > x) and
--     U <= now < U + half_ms mean the trip record was lost with the hash
--     (it expired during a long OPEN): t = "U 0 0" is made again and they
--     are added (and the bucket counts dropped: the breaker is HALF-OPEN).
--     Otherwise probes are dropped, and each bucket count that still counts
--     at now is added into the ring (r:<c>) under its bucket. Buckets that
--     no longer count leave the ring when it is written.
-- Every check of a merchant comes before its first write: a value this
-- service does not write stops that merchant's flush with nothing of it
-- written (the other merchants' go on).
--
-- KEYS[1]  the shard's index (sticky_brk_i{S})
-- KEYS[2..] the counts hash of each merchant with counts (sticky_brk_c{S}M)
-- ARGV[1]  now (ms)   ARGV[2]  window_ms   ARGV[3]  bucket_ms
-- ARGV[4]  ring_len   ARGV[5]  half_ms (2 x window: how long HALF-OPEN lasts)
-- ARGV[6]  cap_ms (the longest an index entry of a trip is kept)
-- ARGV[7]  the merchants' tallies, packed (struct, little-endian; one
--   string, not an argument per number: Redis makes a Lua string of each
--   argument, and the service a frame of each, per merchant per tick).
--   Per merchant, in KEYS' order: I2 its connectors, then per connector:
--   I2 length and the bytes of c, I2 nbuckets, (i8 bucket, i8 calls,
--   i8 failures) x nbuckets, i8 probe_until (0 = no probe counts),
--   i8 probe_calls, i8 probe_failures
-- Returns {1, merchants, kept, events}:
--   merchants: per merchant a string of i8s (little-endian): 1, then per
--     connector in order: window_calls, window_failures, T or 0,
--     trip_calls, trip_failures, hc, hf, n, then n triples bucket, calls,
--     failures: the window's ring; or, with nothing of it written,
--     -1 when a stored value is not one this service writes, -2 when the
--     hash is new and the service's Redis user may not PEXPIRE it. A write
--     sets the hash's TTL to max(PTTL, half_ms).
--   kept, events: the index's poll (brk_poll in breaker_common.lua).
local index = KEYS[1]
local now, window, bucket_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ring_len, half, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])

-- One merchant's tallies into its hash `key`; its reply.
local function flush_merchant(key, tallies)
  local pttl = redis.call('PTTL', key)

  -- First every read, check and decision; the writes are kept in order
  -- and made after.
  local hset, hdel, hincr = {}, {}, {}
  local reply = {struct.pack('<i8', 1)}
  -- Whether any connector of the hash has a trip record (its TTL then
  -- follows the trip's rules, brk_keep_ttl).
  local tripped_any = false
  for _, tally in ipairs(tallies) do
    local c = tally.c
    local ring_field = 'r:' .. c
    local stored = redis.call('HMGET', key, 't:' .. c, 'x:' .. c, 'hc:' .. c, 'hf:' .. c, ring_field)
    local T, tc, tf
    if stored[1] then
      T, tc, tf = brk_triple(stored[1])
      if not T then return struct.pack('<i8', -1) end
    end
    local x = stored[2] and brk_whole(stored[2])
    local hc, hf = brk_whole(stored[3]), brk_whole(stored[4])
    if (stored[2] and not x) or not hc or not hf then return struct.pack('<i8', -1) end
    local ring = brk_ring(stored[5], ring_len)
    if not ring then return struct.pack('<i8', -1) end
    -- Whether the ring must be written (or deleted) to say what it holds.
    local ring_dirty = false

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
      if #ring > 0 then
        hdel[#hdel + 1] = ring_field
        ring = {}
      end
    end

    if T then
      tripped_any = true
      if now >= T and has_probes and tally.pu == T then
        hincr[#hincr + 1] = {'hc:' .. c, tally.pc}
        hincr[#hincr + 1] = {'hf:' .. c, tally.pf}
        hc, hf = hc + tally.pc, hf + tally.pf
      end
    else
      local buckets = tally.buckets
      for j = 1, #buckets, 3 do
        local b = buckets[j]
        if brk_counts_in_window(b, now, window, bucket_ms) then
          local held
          for i = 1, #ring, 3 do
            if ring[i] == b then held = i end
          end
          if held then
            ring[held + 1], ring[held + 2] = ring[held + 1] + buckets[j + 1], ring[held + 2] + buckets[j + 2]
          else
            ring[#ring + 1], ring[#ring + 2], ring[#ring + 3] = b, buckets[j + 1], buckets[j + 2]
          end
          ring_dirty = true
        end
      end
    end

    -- The buckets that still count, and those of another instance's clock
    -- ahead of ours (they count later); a write drops the rest and keeps
    -- at most ring_len, the newest.
    local calls, failures, live = 0, 0, {}
    local this_bucket = math.floor(now / bucket_ms)
    for i = 1, #ring, 3 do
      local b = ring[i]
      local counts = brk_counts_in_window(b, now, window, bucket_ms)
      if counts then
        calls, failures = calls + ring[i + 1], failures + ring[i + 2]
      end
      if counts or b > this_bucket then
        live[#live + 1], live[#live + 2], live[#live + 3] = b, ring[i + 1], ring[i + 2]
      else
        ring_dirty = true
      end
    end
    -- The ring as it now stands, written if it changed.
    local ring_value = stored[5] or ''
    if ring_dirty then
      if #live > 3 * ring_len then
        -- Only with clocks far apart: keep the newest ring_len buckets.
        local sorted = {}
        for i = 1, #live, 3 do
          sorted[#sorted + 1] = {live[i], live[i + 1], live[i + 2]}
        end
        table.sort(sorted, function(p, q) return p[1] < q[1] end)
        live = {}
        for i = #sorted - ring_len + 1, #sorted do
          local slot = sorted[i]
          live[#live + 1], live[#live + 2], live[#live + 3] = slot[1], slot[2], slot[3]
        end
      end
      if #live > 0 then
        ring_value = brk_ring_value(live)
        hset[#hset + 1] = ring_field
        hset[#hset + 1] = ring_value
      else
        ring_value = ''
        if #ring > 0 then
          hdel[#hdel + 1] = ring_field
        end
      end
    end
    -- The ring only serves to foresee a trip as old calls age out, which
    -- a window without failures never makes: sent only with failures, as
    -- it is kept (the engine reads only its buckets that count).
    if failures == 0 then ring_value = '' end
    reply[#reply + 1] = struct.pack('<i8i8i8i8i8i8i8i8', calls, failures, T or 0, tc or 0,
      tf or 0, hc, hf, #ring_value / 24)
    reply[#reply + 1] = ring_value
  end

  if #hset > 0 or #hincr > 0 then
    if not brk_may_create(key, pttl) then
      return struct.pack('<i8', -2)
    end
  end
  -- Deletions first, so a field both dropped and made again above (a timed
  -- out trip, then a lost one made again) ends as made.
  -- (A merchant's fields are a few per connector: one call each, no
  -- chunks, and no closure made per merchant.)
  if #hdel > 0 then redis.call('HDEL', key, unpack(hdel)) end
  if #hset > 0 then redis.call('HSET', key, unpack(hset)) end
  for _, incr in ipairs(hincr) do
    redis.call('HINCRBY', key, incr[1], brk_fmt(incr[2]))
  end
  if #hdel == 0 and #hincr == 0 and not tripped_any and pttl > 0 then
    -- Only rings written to a hash that already had a TTL: its
    -- counts need WINDOW plus a bucket, so it is re-armed to half_ms only
    -- once less than WINDOW and two buckets is left, not at every tick
    -- (a PEXPIRE per merchant per tick, for nothing).
    if #hset > 0 and pttl < window + 2 * bucket_ms then
      redis.call('PEXPIRE', key, brk_fmt(half))
    end
  elseif #hset > 0 or #hincr > 0 or #hdel > 0 then
    brk_keep_ttl(key, half)
  end
  return table.concat(reply)
end

-- The merchants' tallies, as sent, each flushed in turn.
local merchants, packed, at = {}, ARGV[7], 1
for m = 2, #KEYS do
  local tallies, connectors = {}, nil
  connectors, at = struct.unpack('<I2', packed, at)
  for _ = 1, connectors do
    local len, c, n
    len, at = struct.unpack('<I2', packed, at)
    c, at = string.sub(packed, at, at + len - 1), at + len
    n, at = struct.unpack('<I2', packed, at)
    -- The buckets flat, three numbers each, as the ring.
    local buckets = {struct.unpack(brk_ring_format(n), packed, at)}
    at = buckets[#buckets]
    buckets[#buckets] = nil
    local tally = {c = c, buckets = buckets}
    tally.pu, tally.pc, tally.pf, at = struct.unpack('<i8i8i8', packed, at)
    tallies[#tallies + 1] = tally
  end
  merchants[#merchants + 1] = flush_merchant(KEYS[m], tallies)
end

local kept, events = brk_poll(index, now, half, cap)
return {1, merchants, kept, events}
