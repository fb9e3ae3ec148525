-- Shared by the two write scripts, and put in front of each at build time
-- (src/storage/scripts.rs): the attempt memory, the import mark, and the
-- check that a stored value is one this service writes.
-- Mirrors domain::attempts::Remembered and domain::import_mark::ImportMark
-- (held equal by src/storage/scripts/tests). Which fields are bookkeeping
-- (domain::attempts::is_bookkeeping: a name starting with ':') is tested
-- where the scripts need it, record_success.lua's cap.
local ATTEMPTS, DIGEST, REMEMBERED = ':a', 8, 8
local MARK, FILE_ID, MAX_MARK = ':i', 8, 28

-- The stored import mark `stored` (a hash's `:i`, or nil) against the import
-- row `row` (the file's 8-byte identity, then the row in decimal): -1 when
-- the stored value is not one this service writes, 2 when it covers the row
-- (same file, the row at or before the stored one: applied already), nil
-- otherwise. One function, not two: every local function is a closure made
-- anew on each call of the script, RecordOutcome's included.
local function mark_verdict(stored, row)
  if not stored then
    return nil
  end
  if #stored <= FILE_ID or #stored > MAX_MARK
      or string.match(stored, '^%d+$', FILE_ID + 1) == nil then
    return -1
  end
  if string.sub(stored, 1, FILE_ID) == string.sub(row, 1, FILE_ID)
      and tonumber(string.sub(stored, FILE_ID + 1)) >= tonumber(string.sub(row, FILE_ID + 1)) then
    return 2
  end
  return nil
end

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

