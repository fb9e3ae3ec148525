-- The permission probe: which of the commands the service needs may its
-- Redis user not run, on the keys it runs them on? It asks
-- redis.acl_check_cmd, so it runs none of them and writes nothing.
--
-- ARGV  each need in turn: its word count n, then its n words (the command
--       and its arguments, with keys of the service's own families)
-- Returns the numbers (from 1) of the needs refused, {} when none; or {-1}
-- when this server cannot say (no redis.acl_check_cmd: Redis before 7).
if not redis.acl_check_cmd then
  return {-1}
end
local refused, at, need = {}, 1, 0
while at <= #ARGV do
  local n = tonumber(ARGV[at])
  need = need + 1
  -- An unknown command raises an error rather than answering false.
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, at + 1, at + n))
  if not ok or not allowed then
    refused[#refused + 1] = need
  end
  at = at + 1 + n
end
return refused
