-- Many script calls in one EVALSHA, for the bulk import.
--
-- This file is the end of a script assembled at build time
-- (src/storage/scripts.rs): attempts.lua, then record_success.lua,
-- record_failure.lua and admit.lua, each wrapped unchanged as a function of
-- (KEYS, ARGV), then this loop. So every row runs the very code that
-- RecordOutcome's calls run; only the round trip is shared. A pipeline of
-- single EVALSHAs costs Redis a command dispatch per row, and costs the
-- importer a socket write per row.
--
-- KEYS[i]  call i's one key (on Cluster, all in one slot)
-- ARGV     per call, in order: the script ('s' record_success,
--          'f' record_failure, 'a' admit), its argument count n, its n
--          arguments
-- Returns one reply per call, in order: the script's own reply (an array of
-- integers), or the error's message as a string. A call's error (WRONGTYPE,
-- OOM) is caught, so it stops that call only: the script checks before it
-- writes, and the calls around it run as they would alone.
-- One KEYS table and one ARGV table serve every call, refilled each time:
-- a table per call cost Redis about a tenth more time per row (allocation
-- and garbage collection). A shorter call clears what a longer one left,
-- so a script sees exactly its own arguments.
local scripts = { s = record_success, f = record_failure, a = admit }
local replies, at = {}, 1
local keys, args = {}, {}
for i = 1, #KEYS do
  local script, count = scripts[ARGV[at]], tonumber(ARGV[at + 1])
  for j = 1, count do
    args[j] = ARGV[at + 1 + j]
  end
  for j = #args, count + 1, -1 do
    args[j] = nil
  end
  at = at + 2 + count
  keys[1] = KEYS[i]
  local ok, reply = pcall(script, keys, args)
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' and reply.err then
    replies[i] = reply.err
  else
    replies[i] = tostring(reply)
  end
end
return replies
