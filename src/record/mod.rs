//! The RecordOutcome use case: which Redis calls an outcome makes, and in
//! what order, decided by one plan (`plan.rs`) that RecordOutcome drives
//! here one call at a time and the bulk import drives in batched rounds.
//! Keeping the flow here, outside the Redis adapter, is what makes
//! admission impossible to skip: the adapter only runs the ops it is given.
//!
//! With an attempt id, each write script checks and remembers the attempt in
//! the same atomic step as the write, so a repeat writes nothing. Admission
//! sits between two writes: when it fails, the customer's hash was not
//! touched, so the call reports that nothing was applied whatever the
//! admission call's own fate.

mod command;
pub(crate) mod plan;

use std::time::{Duration, Instant};

pub use command::{RawOutcome, RecordCommand};

use crate::domain::Rules;
use crate::domain::counts::Recorded;
use crate::domain::keys;
use crate::storage::{NotApplied, Op, RedisStore, Reply, StorageError, Times};
use plan::{Admission, Plan, Step, Write};

/// The most Redis calls one outcome makes: a new customer's success tries
/// the write, asks admission, then creates the hash.
const MOST_REDIS_CALLS: u32 = 3;

/// How long a call may take when its caller sets no shorter deadline: one
/// Redis timeout for each call the longest flow makes, and one to spare.
pub fn call_ceiling(redis_command_timeout: Duration) -> Duration {
    redis_command_timeout.saturating_mul(MOST_REDIS_CALLS + 1)
}

/// Applies one outcome under `rules`, answering by `deadline`.
pub async fn record_outcome(
    store: &RedisStore,
    rules: &Rules,
    command: &RecordCommand,
    deadline: Instant,
) -> Result<Recorded, StorageError> {
    let key = keys::customer_key(&command.tenant, &command.merchant, &command.customer);
    let write = Write::new(command, &key, rules);
    let mut plan = Plan::start(command.outcome, Admission::Required);
    loop {
        plan = match plan.step() {
            Step::Write { create } => {
                let reply = store.run(write.op(create, Times::ONE), deadline).await?;
                plan.written(reply).map_err(|_| not_created())?
            }
            Step::MemoryGuard => plan.guarded(store.memory_guard_refuses(&key)),
            Step::Budget => {
                let admission_key = keys::admission_key(&command.tenant, &command.merchant);
                let request = plan::admission_request(
                    rules,
                    &command.merchant,
                    crate::process::unix_millis(),
                );
                let op = Op::Admit {
                    key: &admission_key,
                    request,
                    asking: 1,
                };
                let reply = store.run(op, deadline).await.map_err(nothing_written)?;
                plan.admitted(admitted(reply)? == 1)
            }
            Step::Done(recorded) => return Ok(recorded),
        };
    }
}

/// How many the admission call admitted.
pub(crate) fn admitted(reply: Reply) -> Result<u32, StorageError> {
    match reply {
        Reply::Admitted { admitted, .. } => Ok(admitted),
        other => Err(StorageError::Unexpected(format!(
            "admit replied as a write: {other:?}"
        ))),
    }
}

/// The plan's [`plan::NotCreated`] as the caller sees it.
pub(crate) fn not_created() -> StorageError {
    StorageError::Unexpected("record_success did not create the hash".into())
}

/// An admission failure as the caller sees it: the customer's hash was not
/// touched, so a retry is safe even if the admission counter moved.
fn nothing_written(error: StorageError) -> StorageError {
    match error {
        StorageError::MaybeApplied { detail, .. } => StorageError::Unavailable {
            why: NotApplied::EarlierStepFailed,
            detail: format!(
                "admission got no answer, the customer's hash was not written: {detail}"
            ),
        },
        other => other,
    }
}
