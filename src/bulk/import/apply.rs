//! Rows applied in rounds: many rows per Redis round trip, each customer's
//! rows in file order. This is the batched driver of the record plan
//! (`crate::record::plan`), which decides every row's steps exactly as it
//! does RecordOutcome's.
//!
//! A round sends every row it holds at once ([`RedisStore::run_batch`]: one
//! pipeline per connection, many rows per script call, a customer's rows on
//! one connection in order). Four rounds run at once, on customers of
//! different lanes (`lanes.rs`).
//!
//! A row whose plan goes on past its write (a new customer's first
//! success) takes the plan's next steps with the round's other such rows:
//! the memory guard, then one budget call per merchant for all of its new
//! customers (each decided as if alone), then the admitted ones' writes,
//! two more batched round trips in all. Once a row of a customer is held
//! back this way, or could not run (NOSCRIPT, a moved slot), the
//! customer's later rows of the round are held too, for the next round,
//! where they start their plan again: they ran against a hash that did not
//! exist yet, so they wrote nothing (a success without `create` and a
//! failure on an absent hash never write), and sending them again cannot
//! apply anything twice. A later row that did write (possible only if
//! someone else created the hash meanwhile) is kept as applied. With
//! `--no-admission` the plan lets every success create, so a round is one
//! trip.

use std::collections::{HashMap, HashSet};

use super::summary::Tally;
use crate::bulk::rows::Row;
use crate::domain::Rules;
use crate::domain::counts::Recorded;
use crate::domain::import_mark::{FileId, ImportMark};
use crate::domain::keys::{self, CustomerKey};
use crate::process::unix_millis;
use crate::record::plan::{self, Admission, Plan, Step, Write};
use crate::record::{admitted, not_created};
use crate::storage::{BatchOutcome, Op, RedisStore, Reply, StorageError, Times};

/// How often one row may fail to run (NOSCRIPT, a moved slot) before the
/// import gives up: the scripts are loaded again and the slot table
/// refreshed after each, so more means Redis keeps refusing.
const MOST_NOT_RUN: u8 = 5;

/// A row in flight: its place among the file's data rows, its key, and
/// where its plan stands.
#[derive(Debug)]
pub struct Pending {
    /// 0-based among the file's data rows (bad and skipped rows included).
    pub index: u64,
    pub row: Row,
    key: CustomerKey,
    plan: Plan,
    not_run: u8,
}

impl Pending {
    pub fn new(index: u64, row: Row) -> Self {
        let command = &row.command;
        let key = keys::customer_key(&command.tenant, &command.merchant, &command.customer);
        Self {
            index,
            key,
            // Started again, with the import's admission, at each round.
            plan: Plan::start(row.command.outcome, Admission::Required),
            row,
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

/// What became of a row's step.
#[derive(Clone)]
enum Fate {
    /// The plan moved on (to its end, or to its next step).
    Moved(Plan),
    /// Not run; send again.
    Again,
    /// Redis answered that this row cannot be applied (a foreign value
    /// under the key): reported, not applied.
    Refused(StorageError),
    /// No answer: the import stops.
    Lost(StorageError),
}

impl Applier<'_> {
    fn admission(&self) -> Admission {
        if self.no_admission {
            Admission::Skipped
        } else {
            Admission::Required
        }
    }

    /// Applies `round` (in file order). Finished rows are counted on
    /// `tally` (their problems told to `report`); the rows to send again
    /// come back, in file order. `Err`: Redis failed, the import must stop;
    /// the rows that may not have been applied are in `held` all the same.
    pub async fn apply(
        &self,
        mut round: Vec<Pending>,
        tally: &mut Tally,
        report: &mut dyn FnMut(String),
        held: &mut Vec<Pending>,
    ) -> Result<(), StorageError> {
        let mut fatal = None;
        for pending in &mut round {
            pending.plan = Plan::start(pending.row.command.outcome, self.admission());
        }
        let fates = self.write_all(&round).await;
        let mut held_customers: HashSet<String> = HashSet::new();
        let mut to_admit = Vec::new();
        for (mut pending, fate) in round.into_iter().zip(fates) {
            if held_customers.contains(pending.key.as_str()) {
                match fate {
                    Fate::Moved(plan) if matches!(plan.step(), Step::Done(recorded) if wrote(recorded)) =>
                    {
                        pending.plan = plan;
                        self.finish(pending, tally, report, held, &mut fatal);
                    }
                    Fate::Lost(error) => {
                        fatal.get_or_insert(error);
                        held.push(pending);
                    }
                    _ => held.push(pending),
                }
                continue;
            }
            match fate {
                Fate::Moved(plan) if plan.step() == Step::MemoryGuard => {
                    held_customers.insert(pending.key.as_str().to_owned());
                    pending.plan = plan;
                    to_admit.push(pending);
                }
                Fate::Moved(plan) if matches!(plan.step(), Step::Done(_)) => {
                    pending.plan = plan;
                    self.finish(pending, tally, report, held, &mut fatal);
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

    /// A row whose plan has finished is counted; one that stopped anywhere
    /// else broke the plan's order.
    fn finish(
        &self,
        pending: Pending,
        tally: &mut Tally,
        report: &mut dyn FnMut(String),
        held: &mut Vec<Pending>,
        fatal: &mut Option<StorageError>,
    ) {
        match pending.plan.step() {
            Step::Done(recorded) => tally.finish(&pending.row, recorded),
            _ => self.not_done(
                pending,
                Fate::Lost(not_created()),
                tally,
                report,
                held,
                fatal,
            ),
        }
    }

    /// A row that is not finished by this step: sent again, reported, or
    /// the reason to stop.
    fn not_done(
        &self,
        mut pending: Pending,
        fate: Fate,
        tally: &mut Tally,
        report: &mut dyn FnMut(String),
        held: &mut Vec<Pending>,
        fatal: &mut Option<StorageError>,
    ) {
        match fate {
            Fate::Moved(plan) => {
                pending.plan = plan;
                self.finish(pending, tally, report, held, fatal);
            }
            Fate::Again if pending.not_run < MOST_NOT_RUN => {
                pending.not_run += 1;
                held.push(pending);
            }
            Fate::Again => {
                fatal.get_or_insert(StorageError::Unexpected(
                    "Redis keeps refusing to run the scripts (NOSCRIPT or a moving slot)".into(),
                ));
                held.push(pending);
            }
            Fate::Refused(error) => {
                let command = &pending.row.command;
                let tenant = match command.tenant.id() {
                    Some(id) => format!(", tenant {id}"),
                    None => String::new(),
                };
                report(format!(
                    "line {}: not applied: {error} (merchant {}{tenant})",
                    pending.row.line,
                    command.merchant.as_str()
                ));
                tally.refused += 1;
            }
            Fate::Lost(error) => {
                fatal.get_or_insert(error);
                held.push(pending);
            }
        }
    }

    /// New customers' first successes, past their first write: the memory
    /// guard, then the budget (one batch for all), then the admitted ones'
    /// writes (one more batch).
    async fn admit_and_create(
        &self,
        rows: Vec<Pending>,
        tally: &mut Tally,
        report: &mut dyn FnMut(String),
        held: &mut Vec<Pending>,
        fatal: &mut Option<StorageError>,
    ) {
        let mut asking = Vec::with_capacity(rows.len());
        for mut pending in rows {
            pending.plan = pending
                .plan
                .guarded(self.store.memory_guard_refuses(&pending.key));
            if pending.plan.step() == Step::Budget {
                asking.push(pending);
            } else {
                self.finish(pending, tally, report, held, fatal);
            }
        }
        // One call per merchant for all of its new customers of the round,
        // in file order: each decided as if alone, one after the other.
        let mut merchants: Vec<Vec<Pending>> = Vec::new();
        // A budget is per (tenant, merchant).
        let mut merchant_at: HashMap<(String, String), usize> = HashMap::new();
        for pending in asking {
            let command = &pending.row.command;
            let merchant = (
                command.tenant.as_str().to_owned(),
                command.merchant.as_str().to_owned(),
            );
            let at = *merchant_at.entry(merchant).or_insert_with(|| {
                merchants.push(Vec::new());
                merchants.len() - 1
            });
            merchants[at].push(pending);
        }
        let now_ms = unix_millis();
        let admission_keys: Vec<_> = merchants
            .iter()
            .map(|group| {
                let command = &group[0].row.command;
                keys::admission_key(&command.tenant, &command.merchant)
            })
            .collect();
        let ops = merchants
            .iter()
            .zip(&admission_keys)
            .map(|(group, key)| Op::Admit {
                key,
                request: plan::admission_request(
                    self.rules,
                    &group[0].row.command.merchant,
                    now_ms,
                ),
                asking: asking_of(group),
            })
            .collect();
        let decisions = self.store.run_batch(ops).await;
        let mut creating = Vec::new();
        for (group, outcome) in merchants.into_iter().zip(decisions) {
            let (fate, first) = match outcome {
                BatchOutcome::Replied(Ok(reply)) => match admitted(reply) {
                    Ok(n) => (None, n),
                    Err(error) => (Some(Fate::Lost(error)), 0),
                },
                BatchOutcome::Replied(Err(error)) => (Some(Fate::Refused(error)), 0),
                BatchOutcome::NotRun => (Some(Fate::Again), 0),
                BatchOutcome::Failed(error) => (Some(failed(error)), 0),
            };
            for (at, mut pending) in group.into_iter().enumerate() {
                let admitted = u32::try_from(at).is_ok_and(|at| at < first);
                match &fate {
                    None => {
                        pending.plan = pending.plan.admitted(admitted);
                        if admitted {
                            creating.push(pending);
                        } else {
                            self.finish(pending, tally, report, held, fatal);
                        }
                    }
                    Some(fate) => self.not_done(pending, fate.clone(), tally, report, held, fatal),
                }
            }
        }
        if creating.is_empty() {
            return;
        }
        let fates = self.write_all(&creating).await;
        for (pending, fate) in creating.into_iter().zip(fates) {
            self.not_done(pending, fate, tally, report, held, fatal);
        }
    }

    /// Each row's write, as its plan's [`Step::Write`] asks, in one batch.
    async fn write_all(&self, rows: &[Pending]) -> Vec<Fate> {
        let writes: Vec<Write<'_>> = rows
            .iter()
            .map(|p| Write::new(&p.row.command, &p.key, self.rules))
            .collect();
        let ops = rows
            .iter()
            .zip(&writes)
            .map(|(pending, write)| {
                let create = matches!(pending.plan.step(), Step::Write { create: true });
                let times = Times {
                    times: pending.row.times,
                    mark: self.file.map(|file| ImportMark {
                        file,
                        row: pending.index,
                    }),
                };
                write.op(create, times)
            })
            .collect();
        let outcomes = self.store.run_batch(ops).await;
        rows.iter()
            .zip(outcomes)
            .map(|(pending, outcome)| match outcome {
                BatchOutcome::Replied(Ok(reply)) => written(pending.plan, reply),
                BatchOutcome::Replied(Err(error)) => Fate::Refused(error),
                BatchOutcome::NotRun => Fate::Again,
                BatchOutcome::Failed(error) => failed(error),
            })
            .collect()
    }
}

/// A write's reply as its row's fate.
fn written(plan: Plan, reply: Reply) -> Fate {
    match plan.written(reply) {
        Ok(plan) => Fate::Moved(plan),
        Err(_) => Fate::Lost(not_created()),
    }
}

/// Whether a finished write changed or found the hash (so a held
/// customer's later row that got it is kept as applied).
fn wrote(recorded: Recorded) -> bool {
    matches!(
        recorded,
        Recorded::Applied { .. } | Recorded::Duplicate { .. }
    )
}

/// A call that failed: a key the service does not own (a value of another
/// Redis type, a foreign value) is that row's problem, reported and
/// skipped, the scripts having checked before they wrote; any other error
/// may have left the call unanswered, and stops the import.
fn failed(error: StorageError) -> Fate {
    match error {
        StorageError::ForeignValue { .. } => Fate::Refused(error),
        other => Fate::Lost(other),
    }
}
