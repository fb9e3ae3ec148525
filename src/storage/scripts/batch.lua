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
local scripts = { s = record_success, f = record_failure, a = admit }
local replies, at = {}, 1
for i = 1, #KEYS do
  local script, count = scripts[ARGV[at]], tonumber(ARGV[at + 1])
  local args = {}
  for j = 1, count do
    args[j] = ARGV[at + 1 + j]
  end
  at = at + 2 + count
  local ok, reply = pcall(script, { KEYS[i] }, args)
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' and reply.err then
    replies[i] = reply.err
  else
    replies[i] = tostring(reply)
  end
end
return replies
