//! The RecordOutcome use case: the one place that decides which Redis calls
//! an outcome makes, and in what order.
//!
//! A success for a customer that already has a hash is one script call. A
//! success for a new customer must first pass the memory guard (no Redis
//! call: the guard's state is polled in the background) and the merchant's
//! admission budget, and only then is the hash created; a customer refused
//! by either gets nothing written. The script's own answer (no hash) is what
//! makes a customer new, so an existing customer is never refused. A gateway failure never creates anything. Keeping
//! this flow here, outside the Redis adapter, is what makes admission
//! impossible to skip: the adapter's write scripts are crate-private.
//!
//! With an attempt id, each write script checks and remembers the attempt in
//! the same atomic step as the write, so a repeat writes nothing. Admission
//! sits between two writes: when it fails, the customer's hash was not
//! touched, so the call reports that nothing was applied whatever the
//! admission call's own fate.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::domain::admission::AdmissionRefusal;
use crate::domain::attempts::AttemptId;
use crate::domain::combo::Combo;
use crate::domain::counts::{Outcome, Recorded};
use crate::domain::ids::{Connector, PaymentMethod, PaymentMethodType};
use crate::domain::ids::{CustomerId, MerchantId};
use crate::domain::keys;
use crate::domain::{InvalidInput, Rules};
use crate::storage::{AdmissionRequest, NotApplied, RedisStore, StorageError, SuccessWrite};

/// The most Redis calls one outcome makes: a new customer's success tries
/// the write, asks admission, then creates the hash.
const MOST_REDIS_CALLS: u32 = 3;

/// A validated RecordOutcome.
#[derive(Debug, Clone)]
pub struct RecordCommand {
    pub merchant: MerchantId,
    pub customer: CustomerId,
    pub combo: Combo,
    pub outcome: Outcome,
    /// The orchestrator's attempt id, when it sent one.
    pub attempt: Option<AttemptId>,
}

/// The text fields of one outcome as a caller sends them (a RecordOutcome
/// request, or a row of `sticky-routing import`), before validation.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawOutcome<'a> {
    pub merchant_id: &'a str,
    pub customer_id: &'a str,
    pub payment_method: &'a str,
    pub payment_method_type: &'a str,
    pub connector: &'a str,
    pub attempt_id: &'a str,
}

impl RecordCommand {
    /// Validates `raw` field by field, in the request's declaration order,
    /// reporting the first bad one by name; `outcome` is read in its place
    /// (after the connector), each caller from its own spelling of it. One
    /// function for every way in, so an import row and a request obey the
    /// same rules.
    pub fn parse(
        raw: RawOutcome<'_>,
        outcome: impl FnOnce() -> Result<Outcome, InvalidInput>,
    ) -> Result<Self, InvalidInput> {
        let merchant = MerchantId::parse(raw.merchant_id)?;
        let customer = CustomerId::parse(raw.customer_id)?;
        let method = PaymentMethod::parse(raw.payment_method)?;
        let method_type = PaymentMethodType::parse(raw.payment_method_type)?;
        let connector = Connector::parse(raw.connector)?;
        // The combo's length is reported as `connector` (field 5), so it is
        // checked before `outcome` (field 6): a connector that fits alone
        // but not with the method is the first bad field.
        let combo = Combo::new(&method, &method_type, &connector)?;
        let outcome = outcome()?;
        let attempt = AttemptId::parse(raw.attempt_id)?;
        Ok(Self {
            merchant,
            customer,
            combo,
            outcome,
            attempt,
        })
    }
}

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
    let key = keys::customer_key(&command.merchant, &command.customer);
    let attempt = command.attempt.as_ref().map(AttemptId::digest);
    match command.outcome {
        Outcome::GatewayFailure => {
            store
                .write_failure(
                    &key,
                    &command.combo,
                    rules.key_ttl_secs(),
                    attempt,
                    deadline,
                )
                .await
        }
        Outcome::Success => {
            let mut write = SuccessWrite {
                field: command.combo.field(),
                ttl_secs: rules.key_ttl_secs(),
                cap: rules.max_combos_per_customer,
                create: false,
                attempt,
            };
            if let Some(recorded) = store.write_success(&key, write, deadline).await? {
                return Ok(recorded);
            }
            // A new customer. The memory guard is asked before the budget,
            // so a refused customer spends none of the merchant's budget.
            if store.memory_guard_refuses(&key) {
                return Ok(Recorded::NotAdmitted(AdmissionRefusal::MemoryGuard));
            }
            let request = AdmissionRequest {
                now_ms: unix_millis(),
                window_ms: rules.admission_window_ms(),
                budget: rules.budgets.for_merchant(&command.merchant),
            };
            let admission_key = keys::admission_key(&command.merchant);
            let decision = store
                .admit(&admission_key, request, deadline)
                .await
                .map_err(nothing_written)?;
            if !decision.admitted {
                return Ok(Recorded::NotAdmitted(AdmissionRefusal::Budget));
            }
            write.create = true;
            store
                .write_success(&key, write, deadline)
                .await?
                .ok_or_else(|| {
                    StorageError::Unexpected("record_success did not create the hash".into())
                })
        }
    }
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

pub(crate) fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
