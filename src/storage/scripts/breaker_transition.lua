-- One breaker's transition, decided by the engine (src/breaker/) with the
-- domain's rules and applied here only if the breaker is still where the
-- engine saw it (compare and set), so that of several instances deciding
-- the same transition, one applies it.
-- (breaker_common.lua comes first: the counts hash's layout and helpers.)
--
-- Both keys are the merchant's, in one Cluster slot (hash tag {M}).
-- KEYS[1]  the merchant's counts hash (sticky_brk_c{M})
-- KEYS[2]  the breaker's open key (sticky_brk_o{M}C): a hash, field v =
--          the trip "T calls failures", with a TTL of open_for: OPEN in
--          Redis while it lives
-- ARGV[1]  kind: trip | close | reopen      ARGV[2]  the connector c
-- ARGV[3]  now (ms)   ARGV[4]  open_for_ms   ARGV[5]  half_ms (2 x window)
-- ARGV[6]  expect_T: the open_until_ms the engine saw (close, reopen)
-- ARGV[7]  window_ms  ARGV[8]  bucket_ms     ARGV[9]  ring_len
--          (the ring the trip reads its counts from and clears)
--
--   trip:   refused if t:<c> is present and now < T + half_ms (OPEN or
--           HALF-OPEN). Else T = now + open_for; t = "T calls failures",
--           the window's counts read here from the ring; the ring, hc, hf
--           go (a timed-out trip before it: x = its T); the open key is
--           set. Returns {1, T, calls, failures}.
--   close:  only if t's T == expect_T: t, hc, hf and the ring go, x = T,
--           the open key goes. Returns {1}.
--   reopen: only if t's T == expect_T: T' = now + open_for,
--           t = "T' hc hf" (the probes that reopened it), hc, hf and the
--           ring go, the open key is set. Returns {1, T', hc, hf}.
-- Other answers, all with nothing written: {0} refused (not where the
-- engine saw it); {-1} a stored value is not one this service writes;
-- {-2} a key would be made that the service's Redis user may not PEXPIRE.
-- TTLs: the counts hash max(PTTL, half_ms) after a close, max(PTTL,
-- half_ms, open_for) after a trip or a reopen; the open key open_for.
local counts, open_key = KEYS[1], KEYS[2]
local kind, c = ARGV[1], ARGV[2]
local now, open_for, half = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local expect = tonumber(ARGV[6])
local window, bucket_ms, ring_len = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

local ring = brk_ring_fields(c, ring_len)
local stored = redis.call('HMGET', counts, 't:' .. c, 'hc:' .. c, 'hf:' .. c, unpack(ring))
local T, tc, tf
if stored[1] then
  T, tc, tf = brk_triple(stored[1])
  if not T then return {-1} end
end
local hc, hf = brk_whole(stored[2]), brk_whole(stored[3])
if not hc or not hf then return {-1} end
local pttl = redis.call('PTTL', counts)

-- Everything this breaker keeps, but the trip record and x.
local gone = {'hc:' .. c, 'hf:' .. c}
for _, field in ipairs(ring) do
  gone[#gone + 1] = field
end

-- OPEN from now for open_for, with `calls` and `failures` as its counts;
-- `closed` the trip before it, if it timed out.
local function open(calls, failures, closed)
  if not brk_may_create(counts, pttl) or not brk_may_create(open_key, -2) then
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
  return {1, until_ms, calls, failures}
end

if kind == 'trip' then
  if T and now < T + half then
    return {0}
  end
  local calls, failures = 0, 0
  for slot = 1, ring_len do
    if stored[3 + slot] then
      local b, n, f = brk_triple(stored[3 + slot])
      if not b then return {-1} end
      if brk_counts_in_window(b, now, window, bucket_ms) then
        calls, failures = calls + n, failures + f
      end
    end
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
  return {1}
elseif kind == 'reopen' then
  if not T or T ~= expect then
    return {0}
  end
  return open(hc, hf, nil)
end
return redis.error_reply('breaker_transition: unknown kind ' .. tostring(kind))
