-- Shared by the two write scripts, and put in front of each at build time
-- (src/storage/scripts.rs): the attempt memory, and the check that a stored
-- value is one this service writes.
-- Mirrors domain::attempts::Remembered (held equal by src/storage/scripts/tests).
local ATTEMPTS, DIGEST, REMEMBERED = ':a', 8, 8

-- Whether a stored count is a whole number, as HINCRBY writes them.
local function is_count(value)
  return #value <= 20 and string.match(value, '^-?%d+$') ~= nil
end

-- Whether a stored attempts value is one this service writes.
local function is_attempts(value)
  return #value % DIGEST == 0 and #value <= REMEMBERED * DIGEST
end

-- Whether `attempts` holds `attempt`; a match counts only at a digest boundary.
local function remembers(attempts, attempt)
  local at = string.find(attempts, attempt, 1, true)
  while at and at % DIGEST ~= 1 do
    at = string.find(attempts, attempt, at + 1, true)
  end
  return at ~= nil
end

-- `attempts` with `attempt` as the newest, the oldest dropped past the limit.
local function remember(attempts, attempt)
  local remembered = (attempts or '') .. attempt
  if #remembered > REMEMBERED * DIGEST then
    remembered = string.sub(remembered, DIGEST + 1)
  end
  return remembered
end

