-- Shared by breaker_flush.lua and breaker_transition.lua (put in front of
-- each, as attempts.lua is in front of the record scripts): reading the
-- breaker counts hash of one merchant.
--
-- The hash (KEYS[1] of both), fields for connector c:
--   b<slot>:<c>  "<bucket> <calls> <failures>", slot = bucket mod ring_len
--   t:<c>        "<open_until_ms> <calls> <failures>": the trip, from the
--                trip until the close
--   hc:<c> hf:<c> probe calls and failures of the half-open that t names
--   x:<c>        open_until_ms of the last half-open closed
-- Values are decimal whole numbers, read back as Lua numbers: times in ms
-- and counts stay far below 2^53, so they are exact.

-- "a b c", three whole numbers, as three numbers; nil for anything else.
local function brk_triple(s)
  if not s or #s > 64 then return nil end
  local a, b, c = string.match(s, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  if not a then return nil end
  return tonumber(a), tonumber(b), tonumber(c)
end

-- An optional whole number: 0 when absent, nil when not one.
local function brk_whole(s)
  if not s then return 0 end
  if #s > 20 or not string.match(s, '^%-?%d+$') then return nil end
  return tonumber(s)
end

local function brk_fmt(n)
  return string.format('%d', n)
end

-- Whether calls of `bucket` still count at `now`: for at least the window,
-- never after the window plus one bucket, never from a bucket still to
-- come (another instance's clock ahead of ours).
-- Mirrors domain::breaker::BreakerSettings::counts_in_window.
local function brk_counts_in_window(bucket, now, window, bucket_ms)
  return (bucket + 1) * bucket_ms + window > now and bucket <= math.floor(now / bucket_ms)
end

-- The ring slot fields of connector `c`, slot 0 first.
local function brk_ring_fields(c, ring_len)
  local fields = {}
  for slot = 0, ring_len - 1 do
    fields[slot + 1] = 'b' .. slot .. ':' .. c
  end
  return fields
end

-- After a write to `key` that needs it to last `at_least` ms: its TTL,
-- never shortened, and never left without one. Read after the writes, as
-- a write may have emptied the key (Redis deletes it) and made it again.
local function brk_keep_ttl(key, at_least)
  local pttl = redis.call('PTTL', key)
  if pttl ~= -2 and pttl < at_least then
    redis.call('PEXPIRE', key, brk_fmt(at_least))
  end
end

-- Whether a new key (`pttl` -2) may be created: only if it can be given
-- its TTL. (Redis 7 and later can say; 6 has no redis.acl_check_cmd.)
local function brk_may_create(key, pttl)
  return pttl ~= -2 or not redis.acl_check_cmd or redis.acl_check_cmd('PEXPIRE', key, '1')
end

-- `call` with `words` as its arguments, in calls of at most 1000 words
-- (Lua's unpack has a stack limit; pairs stay whole).
local function brk_chunked(words, call)
  local from = 1
  while from <= #words do
    local to = math.min(from + 999, #words)
    call(unpack(words, from, to))
    from = to + 1
  end
end
