-- Pushes one instance's tick of one shard's experiment counts (one frame
-- of bytes, src/storage/store/experiment/log.rs) onto the shard's log,
-- and answers where the log stands, so the instance knows when a batch of
-- it is due to be added into the day hashes (experiment_compact.lua).
-- Redis keeps the frame and never reads it: no command per merchant.
--
-- KEYS[1] the log (sticky_exp_l{S}), KEYS[2] its meta hash
--         (sticky_exp_m{S}), one slot
-- ARGV[1] the frame; empty: push nothing, only answer
-- ARGV[2] the retention in ms: both keys' TTL, renewed by every push
-- ARGV[3] now, Unix ms: the frame's time, if it is the oldest unbatched
-- Returns log_state(), or -2 with nothing written when the service's
-- Redis user may not run one of the writes (a key would be left without
-- its TTL, or a push half made).
local log, meta = KEYS[1], KEYS[2]
local frame, retention = ARGV[1], ARGV[2]
if frame ~= '' then
  -- Every write is checked before the first: a refusal half way would
  -- leave a frame pushed that the service counts as never sent.
  if redis.acl_check_cmd and not (
      redis.acl_check_cmd('RPUSH', log, frame)
      and redis.acl_check_cmd('PEXPIRE', log, retention)
      and redis.acl_check_cmd('HSETNX', meta, 'since', ARGV[3])
      and redis.acl_check_cmd('PEXPIRE', meta, retention)) then
    return -2
  end
  redis.call('RPUSH', log, frame)
  redis.call('PEXPIRE', log, retention)
  redis.call('HSETNX', meta, 'since', ARGV[3])
  redis.call('PEXPIRE', meta, retention)
end
return log_state(log, meta)
