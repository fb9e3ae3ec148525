-- Shared by breaker_flush.lua and breaker_transition.lua (put in front of
-- each, as attempts.lua is in front of the record scripts): reading the
-- breaker counts hash of one merchant, and the shard's index.
--
-- A merchant's counts hash (sticky_brk_c{S}M), fields for connector c:
--   t:<c>        "<open_until_ms> <calls> <failures>": the trip, from the
--                trip until the close
--   hc:<c> hf:<c> probe calls and failures of the half-open that t names
--   x:<c>        open_until_ms of the last half-open closed
--   (r:<c>, a window of the layout before the counts log, is read no
--   more; a trip deletes it.)
-- Values are decimal whole numbers, read back as Lua numbers: times in ms
-- and counts stay far below 2^53, so they are exact. The CLOSED windows
-- are not here: the counts log carries them (breaker_flush.lua).

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

-- The shard's index (sticky_brk_i{S}), one hash naming every breaker of the
-- shard's merchants not CLOSED and every override. Fields (domain::keys):
-- 't' .. len(m) .. ':' .. m .. c a trip, value "T calls failures" (OPEN
-- until T, HALF-OPEN until T + half_ms), with " h" after it once a poll
-- has seen it HALF-OPEN; 'o' .. len(m) .. ':' .. m .. c an override, value
-- "<until_ms> <kind>" (kind open or closed); a named tenant's fields are
-- the same after '@' .. len(tenant) .. ':' .. tenant. An entry lives until
-- it is no longer of use: a trip until T + half_ms, an override until
-- until_ms. The key's TTL is always at least the longest remaining
-- lifetime (a trip's capped by cap_ms), so no entry outlives its use by
-- much and the key never lives without a TTL.

-- The leading whole number of an entry's value: T or until_ms.
local function brk_lifetime_end(value)
  if #value > 64 then return nil end
  local first = string.match(value, '^(%-?%d+) ')
  return first and tonumber(first)
end

-- An entry's kind, 't' or 'o': a named tenant's field starts with
-- '@' .. len(tenant) .. ':' .. tenant (domain::keys), and its kind follows.
local function brk_kind_of(field)
  if string.sub(field, 1, 1) ~= '@' then return string.sub(field, 1, 1) end
  local len, after = string.match(field, '^@(%d+):()')
  if not len then return nil end
  local at = after + tonumber(len)
  return string.sub(field, at, at)
end

-- The poll of the index at `now`: deletes the entries past their lifetime,
-- sets the TTL to the longest remaining one (an override's until_ms -
-- now), or to cap_ms while a trip is held (a trip's life is min(T +
-- half_ms - now, cap_ms), and the key must outlive it), and marks each trip seen
-- HALF-OPEN for the first time. Returns the entries left (flat: field,
-- value, ...) and the transitions time made, each seen by exactly one poll
-- (flat: field, value, what): 'half_open' for a trip whose OPEN ended,
-- 'closed' for a HALF-OPEN that did not decide within half_ms and was
-- taken out. A value it cannot read is left alone and not returned
-- (another version may write it); it lives as long as the key.
local function brk_poll(index, now, half, cap)
  local flat = redis.call('HGETALL', index)
  local kept, expired, marks, events, longest = {}, {}, {}, {}, 0
  local has_trip = false
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    local kind, ends = brk_kind_of(field), brk_lifetime_end(value)
    local left
    if ends and kind == 't' then
      left = math.min(ends + half - now, cap)
    elseif ends and kind == 'o' then
      left = ends - now
    end
    if left and left <= 0 then
      expired[#expired + 1] = field
      if kind == 't' then
        events[#events + 1] = field
        events[#events + 1] = value
        events[#events + 1] = 'closed'
      end
    elseif left then
      if kind == 't' and ends <= now and string.sub(value, -2) ~= ' h' then
        value = value .. ' h'
        marks[#marks + 1] = field
        marks[#marks + 1] = value
        events[#events + 1] = field
        events[#events + 1] = value
        events[#events + 1] = 'half_open'
      end
      kept[#kept + 1] = field
      kept[#kept + 1] = value
      longest = math.max(longest, left)
      has_trip = has_trip or kind == 't'
    end
  end
  brk_chunked(expired, function(...) redis.call('HDEL', index, ...) end)
  brk_chunked(marks, function(...) redis.call('HSET', index, ...) end)
  if has_trip then
    -- A trip's key lives the cap, re-armed by every poll: it must outlive
    -- its trips, or it expires with the last one and the poll that would
    -- see that trip end (and log HALF-OPEN -> CLOSED) finds nothing.
    redis.call('PEXPIRE', index, string.format('%d', math.max(longest, cap)))
  elseif longest > 0 then
    redis.call('PEXPIRE', index, string.format('%d', longest))
  elseif #flat > 0 and redis.call('PTTL', index) == -1 then
    -- Only values it cannot read are left: they still get a TTL.
    redis.call('PEXPIRE', index, string.format('%d', cap))
  end
  return kept, events
end

-- After a write of a trip into the index: its TTL at least `cap`, the
-- longest a trip is kept (the poll that sees the trip end needs the key).
local function brk_index_keep(index, cap)
  if redis.call('PTTL', index) < cap then
    redis.call('PEXPIRE', index, brk_fmt(cap))
  end
end
