//! The rules of one outcome's writes, as a step function with no I/O:
//! write, then (a success for a customer with no hash) the memory guard,
//! then the merchant's budget, then create. RecordOutcome drives it one
//! call at a time (`mod.rs`), the bulk import in batched rounds
//! (`bulk/import/apply.rs`); neither decides anything the plan does not.
//!
//! The script's own answer (no hash) is what makes a customer new, so an
//! existing customer is never refused. The memory guard is asked before the
//! budget, so a customer it refuses spends none of the merchant's budget. A
//! gateway failure never creates anything. Without admission
//! (`import --no-admission`) a success may create from the first write.

use super::command::RecordCommand;
use crate::domain::Rules;
use crate::domain::admission::AdmissionRefusal;
use crate::domain::attempts::AttemptDigest;
use crate::domain::counts::{Outcome, Recorded};
use crate::domain::ids::MerchantId;
use crate::domain::keys::CustomerKey;
use crate::storage::{AdmissionRequest, FailureWrite, Op, Reply, SuccessWrite, Times};

/// Whether a new customer must pass the memory guard and the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// RecordOutcome, and the import by default.
    Required,
    /// `import --no-admission`: history that was admitted once already.
    Skipped,
}

/// What an outcome needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The write: record_success, creating the hash only if `create`, or
    /// record_failure.
    Write { create: bool },
    /// The memory guard of the node that would hold the new customer.
    MemoryGuard,
    /// The merchant's admission budget.
    Budget,
    /// Finished, with this answer.
    Done(Recorded),
}

/// Where one outcome stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    step: Step,
}

/// A write with `create` found no hash: the script broke its contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotCreated;

impl Plan {
    /// An outcome's first step: its write.
    pub fn start(outcome: Outcome, admission: Admission) -> Self {
        let create = outcome == Outcome::Success && admission == Admission::Skipped;
        Self {
            step: Step::Write { create },
        }
    }

    pub fn step(self) -> Step {
        self.step
    }

    /// The write's reply. A success that found no hash and could not create
    /// it goes to the memory guard.
    pub fn written(self, reply: Reply) -> Result<Self, NotCreated> {
        let step = match (self.step, reply) {
            (Step::Write { .. }, Reply::Recorded(recorded)) => Step::Done(recorded),
            (Step::Write { create: false }, Reply::NeedsAdmission) => Step::MemoryGuard,
            _ => return Err(NotCreated),
        };
        Ok(Self { step })
    }

    /// The memory guard's answer for the node that would hold the customer.
    pub fn guarded(self, refuses: bool) -> Self {
        let step = if refuses {
            Step::Done(Recorded::NotAdmitted(AdmissionRefusal::MemoryGuard))
        } else {
            Step::Budget
        };
        Self { step }
    }

    /// The budget's answer: admitted customers are written with `create`.
    pub fn admitted(self, admitted: bool) -> Self {
        let step = if admitted {
            Step::Write { create: true }
        } else {
            Step::Done(Recorded::NotAdmitted(AdmissionRefusal::Budget))
        };
        Self { step }
    }
}

/// One outcome's write, prepared once for every time the plan asks for it.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    key: &'a CustomerKey,
    command: &'a RecordCommand,
    ttl_secs: u64,
    cap: u32,
    attempt: Option<AttemptDigest>,
}

impl<'a> Write<'a> {
    pub fn new(command: &'a RecordCommand, key: &'a CustomerKey, rules: &Rules) -> Self {
        Self {
            key,
            command,
            ttl_secs: rules.key_ttl_secs(),
            cap: rules.max_combos_per_customer,
            attempt: command.attempt.as_ref().map(|attempt| attempt.digest()),
        }
    }

    /// The op for [`Step::Write`], standing for `times`.
    pub fn op(&self, create: bool, times: Times) -> Op<'a> {
        let field = self.command.combo.field();
        match self.command.outcome {
            Outcome::Success => Op::Success {
                key: self.key,
                write: SuccessWrite {
                    field,
                    ttl_secs: self.ttl_secs,
                    cap: self.cap,
                    create,
                    attempt: self.attempt,
                },
                times,
            },
            Outcome::GatewayFailure => Op::Failure {
                key: self.key,
                write: FailureWrite {
                    field,
                    ttl_secs: self.ttl_secs,
                    attempt: self.attempt,
                },
                times,
            },
        }
    }
}

/// The admission request for [`Step::Budget`] of a customer of `merchant`
/// at `now_ms`.
pub fn admission_request(rules: &Rules, merchant: &MerchantId, now_ms: i64) -> AdmissionRequest {
    AdmissionRequest {
        now_ms,
        window_ms: rules.admission_window_ms(),
        budget: rules.budgets.for_merchant(merchant),
    }
}

#[cfg(test)]
mod tests;
