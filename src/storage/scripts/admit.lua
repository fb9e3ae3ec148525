-- Admission of one new customer against the merchant's sliding-window budget.
-- Both window counters live in this one hash, so rolling the window and the
-- check-and-increment are one atomic step on one key (Cluster-safe).
-- Mirrors domain::admission::decide (held equal by src/storage/scripts/tests.rs).
--
-- KEYS[1]  the merchant's admission hash: fields w (window index), cur, prev
-- ARGV[1]  now in ms   ARGV[2]  window length in ms   ARGV[3]  the budget
-- ARGV[4]  optional: how many new customers ask at once (bulk import), each
--          decided as if alone, one after the other; absent means 1, so
--          RecordOutcome's calls are unchanged
-- Returns {admitted, window, current, previous} after the request, admitted
-- being how many were admitted (0 or 1 for one), or, with nothing written,
-- {-1, 0, 0, 0} when a stored value is not a whole number (not one this
-- service writes) and {-2, 0, 0, 0} when the hash is new and the service's
-- Redis user may not PEXPIRE it (it would be left without a TTL).
local key = KEYS[1]
local now, window, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local asking = tonumber(ARGV[4] or '1')
local now_window = math.floor(now / window)

local stored = redis.call('HMGET', key, 'w', 'cur', 'prev')
for i = 1, 3 do
  if stored[i] and not (#stored[i] <= 20 and string.match(stored[i], '^-?%d+$')) then
    return {-1, 0, 0, 0}
  end
end
local w, cur, prev = now_window, 0, 0
if stored[1] then
  local stored_window = tonumber(stored[1])
  local stored_cur, stored_prev = tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
  if stored_window >= now_window then
    w, cur, prev = stored_window, stored_cur, stored_prev
  elseif stored_window == now_window - 1 then
    prev = stored_cur
  end
end

local elapsed = now - w * window
if elapsed < 0 then elapsed = 0 elseif elapsed > window then elapsed = window end
local fraction = elapsed / window

local admitted = 0
while admitted < asking and (cur + prev * (1.0 - fraction)) + 1.0 <= budget do
  cur = cur + 1
  admitted = admitted + 1
end
if admitted > 0 then
  -- A new hash is written only if it can be given its TTL (see
  -- record_success.lua).
  if not stored[1] and redis.acl_check_cmd
      and not redis.acl_check_cmd('PEXPIRE', key, string.format('%d', 2 * window)) then
    return {-2, 0, 0, 0}
  end
  redis.call('HSET', key,
    'w', string.format('%d', w), 'cur', string.format('%d', cur), 'prev', string.format('%d', prev))
  redis.call('PEXPIRE', key, string.format('%d', 2 * window))
end
return {admitted, w, cur, prev}
