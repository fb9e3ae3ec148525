-- Where a shard's experiment counts log stands: the answer the three
-- experiment log scripts end with (experiment_append.lua,
-- experiment_compact.lua, experiment_read.lua put this file first).
--
-- The meta hash's fields: batch (the last batch begun), frames, chunks,
-- next (the batch under way: its first `frames` frames of the log, split
-- into `chunks` chunks, those before `next` added; absent when none is
-- under way), since (Unix ms when the oldest frame not in a batch was
-- pushed; absent when there is none).
-- Returns {frames in the log, batch, frames, chunks, next, since}, 0 for
-- what is absent.
local function log_state(log, meta)
  local m = redis.call('HMGET', meta, 'batch', 'frames', 'chunks', 'next', 'since')
  return {
    redis.call('LLEN', log),
    tonumber(m[1]) or 0, tonumber(m[2]) or 0, tonumber(m[3]) or 0,
    tonumber(m[4]) or 0, tonumber(m[5]) or 0,
  }
end
