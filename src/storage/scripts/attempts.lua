-- Shared by the two write scripts, and put in front of each at build time
-- (src/storage/scripts.rs): the attempt memory, the import mark, which
-- fields are bookkeeping, and the check that a stored value is one this
-- service writes.
-- Mirrors domain::attempts::Remembered, domain::attempts::is_bookkeeping and
-- domain::import_mark::ImportMark (held equal by src/storage/scripts/tests).
local ATTEMPTS, DIGEST, REMEMBERED = ':a', 8, 8
local MARK, FILE_ID, MAX_MARK = ':i', 8, 28

-- Whether a field is bookkeeping (starts with ':'), never a combo.
local function is_bookkeeping(field)
  return string.byte(field, 1) == 58
end

-- Whether a stored import mark is one this service writes: the file's
-- 8-byte identity, then the row in decimal.
local function is_mark(value)
  return #value > FILE_ID and #value <= MAX_MARK
    and string.match(value, '^%d+$', FILE_ID + 1) ~= nil
end

-- Whether the stored mark `stored` covers the row `row` (same file, a row at
-- or before the stored one): that row was applied already.
local function covers(stored, row)
  return string.sub(stored, 1, FILE_ID) == string.sub(row, 1, FILE_ID)
    and tonumber(string.sub(stored, FILE_ID + 1)) >= tonumber(string.sub(row, FILE_ID + 1))
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

