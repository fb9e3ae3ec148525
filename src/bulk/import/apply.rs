//! Rows applied in rounds: many rows per Redis round trip, each customer's
//! rows in file order.
//!
//! A round sends every row it holds at once ([`RedisStore::run_batch`]: one
//! pipeline per connection, many rows per script call, a customer's rows on
//! one connection in order). Four rounds run at once, on customers of
//! different lanes (`lanes.rs`).
//!
//! A success for a customer with no hash yet writes nothing and answers
//! "needs admission"; that row then asks the memory guard and the
//! merchant's budget, and is written with `create` (two more batched round
//! trips for all such rows of the round together; one budget call per
//! merchant asks for all of its new customers, each decided as if alone).
//! Once a row of a customer is held back this way, or could not run
//! (NOSCRIPT, a moved slot), the customer's later rows of the round are
//! held too, for the next round:
//! they ran against a hash that did not exist yet, so they wrote nothing
//! (a success without `create` and a failure on an absent hash never
//! write), and sending them again cannot apply anything twice. A later row
//! that did write (possible only if someone else created the hash
//! meanwhile) is kept as applied. With `--no-admission` every success may
//! create, so a round is one trip.

use std::collections::{HashMap, HashSet};

use super::rows::Row;
use super::summary::Tally;
use crate::domain::Rules;
use crate::domain::admission::AdmissionRefusal;
use crate::domain::counts::{Outcome, Recorded};
use crate::domain::import_mark::{FileId, ImportMark};
use crate::domain::keys::{self, CustomerKey};
use crate::record::unix_millis;
use crate::storage::{
    AdmissionRequest, CallOutcome, RedisStore, ScriptCall, StorageError, SuccessWrite, admitted_of,
    failure_reply, success_reply,
};

/// How often one row may fail to run (NOSCRIPT, a moved slot) before the
/// import gives up: the scripts are loaded again and the slot table
/// refreshed after each, so more means Redis keeps refusing.
const MOST_NOT_RUN: u8 = 5;

/// A row in flight: its place among the file's data rows, and its key.
#[derive(Debug)]
pub struct Pending {
    /// 0-based among the file's data rows (bad and skipped rows included).
    pub index: u64,
    pub row: Row,
    key: CustomerKey,
    not_run: u8,
}

impl Pending {
    pub fn new(index: u64, row: Row) -> Self {
        let key = keys::customer_key(&row.command.merchant, &row.command.customer);
        Self {
            index,
            row,
            key,
            not_run: 0,
        }
    }

    /// The customer's key: rows with the same one must stay in order.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }
}

/// What to do with a round's rows.
pub struct Applier<'a> {
    pub store: &'a RedisStore,
    pub rules: &'a Rules,
    pub no_admission: bool,
    /// The file's identity: each row is checked against, and moves, its
    /// customer's import mark (`domain::import_mark`). `None` for stdin.
    pub file: Option<FileId>,
}

/// How many customers one admission call asks for.
fn asking_of(group: &[Pending]) -> u32 {
    u32::try_from(group.len()).unwrap_or(u32::MAX)
}

/// A row's answer from one step.
#[derive(Clone)]
enum Step {
    Done(Recorded),
    /// A success for a customer with no hash: admission decides.
    NeedsAdmission,
    /// Not run; send again.
    Again,
    /// Redis answered that this row cannot be applied (a foreign value
    /// under the key): reported, not applied.
    Refused(StorageError),
    /// No answer: the import stops.
    Lost(StorageError),
}

impl Applier<'_> {
    /// Applies `round` (in file order). Finished rows are counted on
    /// `tally` (their problems told to `report`); the rows to send again
    /// come back, in file order. `Err`: Redis failed, the import must stop;
    /// the rows that may not have been applied are in `held` all the same.
    pub async fn apply(
        &self,
        round: Vec<Pending>,
        tally: &mut Tally,
        report: &mut dyn FnMut(String),
        held: &mut Vec<Pending>,
    ) -> Result<(), StorageError> {
        let mut fatal = None;
        let calls = round
            .iter()
            .map(|p| self.write_call(p, self.no_admission))
            .collect();
        let outcomes = self.store.run_batch(calls).await;
        let mut held_customers: HashSet<String> = HashSet::new();
        let mut to_admit = Vec::new();
        for (pending, outcome) in round.into_iter().zip(outcomes) {
            let step = step_of(&pending, outcome);
            if held_customers.contains(pending.key.as_str()) {
                match step {
                    Step::Done(
                        recorded @ (Recorded::Applied { .. } | Recorded::Duplicate { .. }),
                    ) => {
                        tally.finish(&pending.row, recorded);
                    }
                    Step::Lost(error) => {
                        fatal.get_or_insert(error);
                        held.push(pending);
                    }
                    _ => held.push(pending),
                }
                continue;
            }
            match step {
                Step::Done(recorded) => tally.finish(&pending.row, recorded),
                Step::NeedsAdmission => {
                    held_customers.insert(pending.key.as_str().to_owned());
                    to_admit.push(pending);
                }
                other => {
                    held_customers.insert(pending.key.as_str().to_owned());
                    self.not_done(pending, other, tally, report, held, &mut fatal);
                }
            }
        }
        if !to_admit.is_empty() {
            self.admit_and_create(to_admit, tally, report, held, &mut fatal)
                .await;
        }
        held.sort_by_key(|p| p.index);
        fatal.map_or(Ok(()), Err)
    }

    /// A row that is not finished by this step: sent again, reported, or
    /// the reason to stop.
    fn not_done(
        &self,
        mut pending: Pending,
        step: Step,
        tally: &mut Tally,
        report: &mut dyn FnMut(String),
        held: &mut Vec<Pending>,
        fatal: &mut Option<StorageError>,
    ) {
        match step {
            Step::Done(recorded) => tally.finish(&pending.row, recorded),
            Step::Again if pending.not_run < MOST_NOT_RUN => {
                pending.not_run += 1;
                held.push(pending);
            }
            Step::Again => {
                fatal.get_or_insert(StorageError::Unexpected(
                    "Redis keeps refusing to run the scripts (NOSCRIPT or a moving slot)".into(),
                ));
                held.push(pending);
            }
            Step::Refused(error) => {
                report(format!(
                    "line {}: not applied: {error} (merchant {})",
                    pending.row.line,
                    pending.row.command.merchant.as_str()
                ));
                tally.refused += 1;
            }
            Step::NeedsAdmission => {
                fatal.get_or_insert(StorageError::Unexpected(
                    "record_success did not create the hash".into(),
                ));
                held.push(pending);
            }
            Step::Lost(error) => {
                fatal.get_or_insert(error);
                held.push(pending);
            }
        }
    }

    /// New customers' first successes: the memory guard, then the budget
    /// (one batch for all), then the admitted ones written with `create`
    /// (one more batch).
    async fn admit_and_create(
        &self,
        rows: Vec<Pending>,
        tally: &mut Tally,
        report: &mut dyn FnMut(String),
        held: &mut Vec<Pending>,
        fatal: &mut Option<StorageError>,
    ) {
        let mut asking = Vec::with_capacity(rows.len());
        for pending in rows {
            // As RecordOutcome: the guard first, so a refused customer
            // spends none of the merchant's budget.
            if self.store.memory_guard_refuses(&pending.key) {
                let refused = Recorded::NotAdmitted(AdmissionRefusal::MemoryGuard);
                tally.finish(&pending.row, refused);
            } else {
                asking.push(pending);
            }
        }
        // One call per merchant for all of its new customers of the round,
        // in file order: each decided as if alone, one after the other.
        let mut merchants: Vec<Vec<Pending>> = Vec::new();
        let mut merchant_at: HashMap<String, usize> = HashMap::new();
        for pending in asking {
            let merchant = pending.row.command.merchant.as_str().to_owned();
            let at = *merchant_at.entry(merchant).or_insert_with(|| {
                merchants.push(Vec::new());
                merchants.len() - 1
            });
            merchants[at].push(pending);
        }
        let now_ms = unix_millis();
        let calls = merchants
            .iter()
            .map(|group| {
                let merchant = &group[0].row.command.merchant;
                let request = AdmissionRequest {
                    now_ms,
                    window_ms: self.rules.admission_window_ms(),
                    budget: self.rules.budgets.for_merchant(merchant),
                };
                let key = keys::admission_key(merchant);
                self.store
                    .admit_call(key.as_str(), request, asking_of(group))
            })
            .collect();
        let decisions = self.store.run_batch(calls).await;
        let mut admitted = Vec::new();
        for (group, outcome) in merchants.into_iter().zip(decisions) {
            let (step, first) = match outcome {
                CallOutcome::Replied(reply) => match admitted_of(&reply, asking_of(&group)) {
                    Ok(n) => (
                        Step::Done(Recorded::NotAdmitted(AdmissionRefusal::Budget)),
                        n,
                    ),
                    Err(error) => (Step::Refused(error), 0),
                },
                CallOutcome::NotRun => (Step::Again, 0),
                CallOutcome::Failed(error) => (failed(error), 0),
            };
            let mut group = group.into_iter();
            admitted.extend(group.by_ref().take(first as usize));
            for pending in group {
                self.not_done(pending, step.clone(), tally, report, held, fatal);
            }
        }
        if admitted.is_empty() {
            return;
        }
        let calls = admitted.iter().map(|p| self.write_call(p, true)).collect();
        let outcomes = self.store.run_batch(calls).await;
        for (pending, outcome) in admitted.into_iter().zip(outcomes) {
            let step = step_of(&pending, outcome);
            self.not_done(pending, step, tally, report, held, fatal);
        }
    }

    /// The row's write: record_success (creating the hash only if `create`)
    /// or record_failure, standing for the row's count.
    fn write_call(&self, pending: &Pending, create: bool) -> ScriptCall {
        let command = &pending.row.command;
        let attempt = command.attempt.as_ref().map(|a| a.digest());
        let ttl_secs = self.rules.key_ttl_secs();
        let mark = self.file.map(|file| ImportMark {
            file,
            row: pending.index,
        });
        match command.outcome {
            Outcome::Success => {
                let write = SuccessWrite {
                    field: command.combo.field(),
                    ttl_secs,
                    cap: self.rules.max_combos_per_customer,
                    create,
                    attempt,
                };
                self.store
                    .success_call(pending.key.as_str(), write, pending.row.times, mark)
            }
            Outcome::GatewayFailure => self.store.failure_call(
                pending.key.as_str(),
                command.combo.field(),
                ttl_secs,
                attempt,
                pending.row.times,
                mark,
            ),
        }
    }
}

/// A write's outcome as a step of its row.
fn step_of(pending: &Pending, outcome: CallOutcome) -> Step {
    match outcome {
        CallOutcome::Replied(reply) => {
            let read = match pending.row.command.outcome {
                Outcome::Success => success_reply(&reply),
                Outcome::GatewayFailure => failure_reply(&reply).map(Some),
            };
            match read {
                Ok(Some(recorded)) => Step::Done(recorded),
                Ok(None) => Step::NeedsAdmission,
                Err(error) => Step::Refused(error),
            }
        }
        CallOutcome::NotRun => Step::Again,
        CallOutcome::Failed(error) => failed(error),
    }
}

/// A call that failed: a key the service does not own (a value of another
/// Redis type, a foreign value) is that row's problem, reported and
/// skipped, the scripts having checked before they wrote; any other error
/// may have left the call unanswered, and stops the import.
fn failed(error: StorageError) -> Step {
    match error {
        StorageError::ForeignValue { .. } => Step::Refused(error),
        other => Step::Lost(other),
    }
}
