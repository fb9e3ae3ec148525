-- The transitions one tick of the breaker engine (src/breaker/) decided
-- for one shard, with the domain's rules, each applied here only if its
-- breaker is still where the engine saw it (compare and set), so that of
-- several instances deciding the same transition, one applies it. Each
-- writes the breaker's counts hash, its OPEN key and the shard's index in
-- one step: no instance can see the counts say OPEN and the index not.
-- (breaker_common.lua comes first: the layouts and helpers.)
--
-- Every key is the shard's, in one Cluster slot (hash tag {S}).
-- KEYS[1]  the shard's index (sticky_brk_i{S})
-- then per transition two keys: the merchant's counts hash
--          (sticky_brk_c{S}M) and the breaker's OPEN key (sticky_brk_o{S}M_C):
--          a hash, field v = the trip "T calls failures", with a TTL of
--          open_for: OPEN in Redis while it lives
-- ARGV[1]  now (ms)   ARGV[2]  open_for_ms   ARGV[3]  half_ms (2 x window)
-- ARGV[4]  window_ms  ARGV[5]  bucket_ms     ARGV[6]  ring_len
--          (the ring the trip reads its counts from and clears)
-- ARGV[7]  cap_ms (the longest the index keeps a trip)
-- then per transition: kind (trip | close | reopen), the connector c,
--   expect_T (the open_until_ms the engine saw; close, reopen), the
--   breaker's trip field in the index, and the window's calls and
--   failures the engine tripped on (trip; 0 0 otherwise: the window is
--   kept in the engine's memory, folded from the shard's counts log)
--
--   trip:   refused if t:<c> is present and now < T + half_ms (OPEN or
--           HALF-OPEN). Else T = now + open_for; t = "T calls failures",
--           the window's counts as sent; a ring of an older layout, hc, hf
--           go (a timed-out trip before it: x = its T); the open key is
--           set; the index names the trip. Reply {1, T, calls, failures}.
--   close:  only if t's T == expect_T: t, hc, hf and the ring go, x = T,
--           the open key goes, and the index's entry of that trip.
--           Reply {1}.
--   reopen: only if t's T == expect_T: T' = now + open_for,
--           t = "T' hc hf" (the probes that reopened it), hc, hf and the
--           ring go, the open key is set, the index names it. Reply
--           {1, T', hc, hf}.
-- Other replies, each with nothing of that transition written: {0}
-- refused (not where the engine saw it); {-1} a stored value is not one
-- this service writes; {-2} a key would be made that the service's Redis
-- user may not PEXPIRE.
-- Returns {reply, reply, ...}, one per transition, in order.
-- TTLs: the counts hash max(PTTL, half_ms) after a close, max(PTTL,
-- half_ms, open_for) after a trip or a reopen; the open key open_for; the
-- index at least the trip's min(T + half_ms - now, cap_ms).
local index = KEYS[1]
local now, open_for, half = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- (ARGV[4..6], the window's shape, are no longer read: the engine sends
-- a trip's counts.)
local cap = tonumber(ARGV[7])

local function transition(counts, open_key, kind, c, expect, field, calls, failures)
  -- r:<c>, a window of the layout before the counts log, goes with a
  -- trip's other counts; nothing reads it any more.
  local ring_field = 'r:' .. c
  local stored = redis.call('HMGET', counts, 't:' .. c, 'hc:' .. c, 'hf:' .. c)
  local T, tc, tf
  if stored[1] then
    T, tc, tf = brk_triple(stored[1])
    if not T then return {-1} end
  end
  local hc, hf = brk_whole(stored[2]), brk_whole(stored[3])
  if not hc or not hf then return {-1} end
  local pttl = redis.call('PTTL', counts)

  -- Everything this breaker keeps, but the trip record and x.
  local gone = {'hc:' .. c, 'hf:' .. c, ring_field}

  -- OPEN from now for open_for, with `calls` and `failures` as its counts;
  -- `closed` the trip before it, if it timed out.
  local function open(calls, failures, closed)
    if not brk_may_create(counts, pttl) or not brk_may_create(open_key, -2)
        or not brk_may_create(index, redis.call('PTTL', index)) then
      return {-2}
    end
    local until_ms = now + open_for
    local trip = string.format('%d %d %d', until_ms, calls, failures)
    redis.call('HDEL', counts, unpack(gone))
    if closed then
      redis.call('HSET', counts, 't:' .. c, trip, 'x:' .. c, brk_fmt(closed))
    else
      redis.call('HSET', counts, 't:' .. c, trip)
    end
    brk_keep_ttl(counts, math.max(half, open_for))
    redis.call('HSET', open_key, 'v', trip)
    redis.call('PEXPIRE', open_key, brk_fmt(open_for))
    redis.call('HSET', index, field, trip)
    brk_index_keep(index, cap)
    return {1, until_ms, calls, failures}
  end

  if kind == 'trip' then
    if T and now < T + half then
      return {0}
    end
    return open(calls, failures, T)
  elseif kind == 'close' then
    if not T or T ~= expect then
      return {0}
    end
    gone[#gone + 1] = 't:' .. c
    redis.call('HDEL', counts, unpack(gone))
    redis.call('HSET', counts, 'x:' .. c, brk_fmt(T))
    brk_keep_ttl(counts, half)
    redis.call('DEL', open_key)
    -- The space ends the number: T = 12 never clears T = 123.
    local indexed = redis.call('HGET', index, field)
    if indexed and string.sub(indexed, 1, #brk_fmt(T) + 1) == brk_fmt(T) .. ' ' then
      redis.call('HDEL', index, field)
    end
    return {1}
  elseif kind == 'reopen' then
    if not T or T ~= expect then
      return {0}
    end
    return open(hc, hf, nil)
  end
  return {-1}
end

local replies, at = {}, 8
for k = 2, #KEYS - 1, 2 do
  local kind, c, expect, field = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2]), ARGV[at + 3]
  local calls, failures = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5])
  at = at + 6
  replies[#replies + 1] = transition(KEYS[k], KEYS[k + 1], kind, c, expect, field, calls, failures)
end
return replies
