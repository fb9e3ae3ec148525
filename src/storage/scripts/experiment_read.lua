-- Reads, at one instant, a shard's experiment counts log, where it stands,
-- and some day hashes of the shard: GetUplift's read. The counts of a
-- merchant-day are its hash's plus the log's not yet added into it
-- (src/storage/store/experiment/log.rs, `unadded`); read together, no
-- count is missed or counted twice while a batch is being added. Writes
-- nothing.
--
-- KEYS[1] the log, KEYS[2] its meta hash, KEYS[3..] day hashes
-- (sticky_exp_{S}M_YYYYMMDD), one slot
-- Returns {log_state(), the log's frames, then each hash's HGETALL}.
local reply = {log_state(KEYS[1], KEYS[2]), redis.call('LRANGE', KEYS[1], 0, -1)}
for i = 3, #KEYS do
  reply[#reply + 1] = redis.call('HGETALL', KEYS[i])
end
return reply
