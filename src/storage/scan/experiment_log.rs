//! The report's read of a shard's experiment counts log: where the log
//! stands (its meta hash) and its frames, as one consistent pair.
//!
//! The read-only user that runs the report may not run scripts, so the
//! pair is read as three commands (the meta hash, the frames, the meta
//! hash again) and read again until the meta hash did not move between:
//! a chunk added meanwhile moves it, and only a chunk changes which
//! frames are added (a push only appends after them).

use fred::interfaces::{HashesInterface, ListInterface};
use fred::prelude::Value;

use super::{HashScanner, ScanError};
use crate::domain::keys;
use crate::domain::shards::Shard;
use crate::storage::ExperimentLog;
use crate::storage::store::{hash_fields, log_state_of_meta};

/// Reads of a pair before the report gives up: a chunk is added every
/// 500 ms at most, and the pair takes milliseconds.
const TRIES: usize = 20;

impl HashScanner {
    /// Where `shard`'s log stands (its frames not counted).
    pub async fn experiment_log_state(&self, shard: Shard) -> Result<ExperimentLog, ScanError> {
        let meta = keys::experiment_log_meta_key(shard);
        let fields: Value = self.timed(self.client.hgetall(&meta)).await?;
        Ok(log_state_of_meta(&hash_fields(fields), 0))
    }

    /// Where `shard`'s log stands and its frames, read at one instant.
    pub async fn experiment_log(
        &self,
        shard: Shard,
    ) -> Result<(ExperimentLog, Vec<Vec<u8>>), ScanError> {
        let log = keys::experiment_log_key(shard);
        for _ in 0..TRIES {
            let before = self.experiment_log_state(shard).await?;
            let frames: Vec<Value> = self.timed(self.client.lrange(&log, 0, -1)).await?;
            let frames: Vec<Vec<u8>> = frames
                .into_iter()
                .filter_map(|f| f.into_bytes().map(|b| b.to_vec()))
                .collect();
            let after = self.experiment_log_state(shard).await?;
            if before.same_batch(&after) {
                let state = ExperimentLog {
                    frames: frames.len() as u64,
                    ..after
                };
                return Ok((state, frames));
            }
        }
        Err(ScanError::Read(format!(
            "the experiment counts log of shard {} moved on at every read",
            shard.index()
        )))
    }

    async fn timed<T>(
        &self,
        call: impl Future<Output = Result<T, fred::prelude::Error>>,
    ) -> Result<T, ScanError> {
        tokio::time::timeout(self.page_within, call)
            .await
            .map_err(|_| ScanError::Read(format!("no answer within {:?}", self.page_within)))?
            .map_err(|e| ScanError::Read(e.to_string()))
    }
}
