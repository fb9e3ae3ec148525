//! The replay itself: the habits a history builds, in memory, and for each
//! attempt the pin GetPin would have given before the attempt is recorded.
//!
//! Every rule is the service's own code: the pin is
//! [`crate::domain::pin::best_candidate`] (GetPin with no eligible list, no
//! scores, no holdout), the write is driven by RecordOutcome's plan
//! ([`crate::record::plan`]) and applied by
//! [`crate::domain::customer_hash`] (the rules the write scripts run), and
//! admission is [`crate::domain::admission::decide`]. What Redis does on
//! its own is done here by `at`: a customer's hash is gone once `at` is
//! past its last write plus `KEY_TTL` ([`outlived`]). The memory guard
//! reads Redis's memory, which a replay does not have: it never refuses.

use super::catalog::{Attempt, Catalog};
use super::customers::Customers;
use super::figures::Tally;
use crate::domain::Rules;
use crate::domain::admission::{self, WindowCounters};
use crate::domain::counts::{Outcome, Recorded};
use crate::domain::customer_hash::{CustomerHash, Left, outlived};
use crate::domain::pin::best_candidate;
use crate::record::plan::{Admission, Plan, Step};
use crate::storage::Reply;

/// One customer with habits: the hash, and when it was last written.
struct Customer {
    hash: CustomerHash<u32>,
    written_ms: i64,
}

/// A merchant's admission counters and figures.
#[derive(Default)]
struct Merchant {
    counters: Option<WindowCounters>,
    tally: Tally,
}

/// What one attempt was to the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen<'c> {
    /// An attempt, and the connector GetPin would have pinned it to.
    Attempt { pin: Option<&'c str> },
    /// A repeat of an attempt id the customer's hash remembers: no attempt.
    Duplicate,
}

/// The write plan asked for something a replay cannot give: a bug.
#[derive(Debug, thiserror::Error)]
#[error("the record plan and the in-memory hash disagree (a bug): {0}")]
pub struct Disagreement(String);

/// The habits of every customer so far, and the figures.
pub struct Engine<'r> {
    rules: &'r Rules,
    admission: Admission,
    cap: usize,
    customers: Customers<Customer>,
    merchants: Vec<Merchant>,
    overall: Tally,
    sweep: Sweep,
}

/// When the customers whose hashes expired were last let go.
#[derive(Default)]
struct Sweep {
    /// The time of the last sweep.
    at_ms: i64,
    /// Attempts since then.
    attempts: usize,
}

impl<'r> Engine<'r> {
    /// A replay under `rules`; with `admission`, new customers need the
    /// merchant's budget.
    pub fn new(rules: &'r Rules, admission: bool) -> Self {
        Self {
            rules,
            admission: if admission {
                Admission::Required
            } else {
                Admission::Skipped
            },
            cap: rules.max_combos_per_customer as usize,
            customers: Customers::default(),
            merchants: Vec::new(),
            overall: Tally::default(),
            sweep: Sweep::default(),
        }
    }

    /// How many customers still have habits at `at_ms` (the end of the
    /// history): those whose hash has not expired by then.
    pub fn customers_at(&mut self, at_ms: i64) -> usize {
        let ttl = self.rules.key_ttl;
        self.customers
            .retain(|customer| !outlived(customer.written_ms, at_ms, ttl));
        self.customers.len()
    }

    /// The figures of every merchant together.
    pub fn overall(&self) -> &Tally {
        &self.overall
    }

    /// Each merchant's figures, by catalog index: the merchants that had
    /// an attempt, a duplicate or a bad row.
    pub fn merchants(&self) -> impl Iterator<Item = (u32, &Tally)> {
        self.merchants
            .iter()
            .enumerate()
            .filter(|(_, merchant)| merchant.tally != Tally::default())
            .map(|(index, merchant)| (index as u32, &merchant.tally))
    }

    /// Counts a bad row, for its merchant too when it had a valid one.
    pub fn bad_row(&mut self, merchant: Option<u32>) {
        self.overall.bad_rows += 1;
        if let Some(merchant) = merchant {
            self.merchant(merchant).tally.bad_rows += 1;
        }
    }

    /// One attempt at `at_ms`: the pin first, from the habits so far, then
    /// the attempt recorded.
    pub fn attempt<'c>(
        &mut self,
        catalog: &'c Catalog,
        attempt: &Attempt,
        at_ms: i64,
    ) -> Result<Seen<'c>, Disagreement> {
        let ttl = self.rules.key_ttl;
        self.sweep_expired(at_ms);
        if let Some(customer) = self.customers.get(attempt.customer)
            && outlived(customer.written_ms, at_ms, ttl)
        {
            self.customers.remove(attempt.customer);
        }
        let customer = self.customers.get(attempt.customer);
        if customer.is_some_and(|c| c.hash.remembers(attempt.attempt)) {
            self.overall.duplicates += 1;
            self.merchant(attempt.merchant).tally.duplicates += 1;
            return Ok(Seen::Duplicate);
        }
        let pin = customer.and_then(|customer| {
            let fields = customer
                .hash
                .fields()
                .map(|(combo, count)| (catalog.field(combo), count));
            best_candidate(
                fields,
                catalog.prefix(attempt.prefix),
                self.rules.min_pin_count,
            )
        });
        let pin = pin.map(|(connector, _)| connector);
        let followed = pin.map(|connector| connector == catalog.connector(attempt.combo));
        let success = attempt.outcome == Outcome::Success;
        self.overall.count(followed, success);
        self.merchant(attempt.merchant)
            .tally
            .count(followed, success);
        self.record(catalog, attempt, at_ms)?;
        Ok(Seen::Attempt { pin })
    }

    /// RecordOutcome's plan, each step answered in memory.
    fn record(
        &mut self,
        catalog: &Catalog,
        attempt: &Attempt,
        at_ms: i64,
    ) -> Result<Recorded, Disagreement> {
        let mut plan = Plan::start(attempt.outcome, self.admission);
        loop {
            plan = match plan.step() {
                Step::Write { create } => {
                    let reply = self.write(catalog, attempt, create, at_ms);
                    plan.written(reply).map_err(|_| {
                        Disagreement(format!("{:?} with create {create}", attempt.outcome))
                    })?
                }
                Step::MemoryGuard => plan.guarded(false),
                Step::Budget => {
                    let window_ms = self.rules.admission_window_ms();
                    let budget = self
                        .rules
                        .budgets
                        .for_merchant(catalog.merchant(attempt.merchant));
                    let merchant = self.merchant(attempt.merchant);
                    let decision = admission::decide(merchant.counters, at_ms, window_ms, budget);
                    merchant.counters = Some(decision.counters);
                    plan.admitted(decision.admitted)
                }
                Step::Done(recorded) => return Ok(recorded),
            };
        }
    }

    /// The write scripts' effect on the customer's hash, as the domain
    /// states it; a write re-arms the hash's TTL (its time is `at_ms`).
    fn write(&mut self, catalog: &Catalog, attempt: &Attempt, create: bool, at_ms: i64) -> Reply {
        let id = attempt.customer;
        let Some(customer) = self.customers.get_mut(id) else {
            return match attempt.outcome {
                Outcome::Success if create => {
                    let hash = CustomerHash::created(attempt.combo, attempt.attempt);
                    self.customers.insert(
                        id,
                        Customer {
                            hash,
                            written_ms: at_ms,
                        },
                    );
                    Reply::Recorded(Recorded::Applied {
                        net_count: 1,
                        pruned: 0,
                    })
                }
                Outcome::Success => Reply::NeedsAdmission,
                Outcome::GatewayFailure => Reply::Recorded(Recorded::IgnoredNoHabit),
            };
        };
        let recorded = match attempt.outcome {
            Outcome::Success => {
                customer
                    .hash
                    .success(attempt.combo, self.cap, attempt.attempt, |combo| {
                        catalog.field(combo)
                    })
            }
            Outcome::GatewayFailure => {
                match customer.hash.failure(attempt.combo, attempt.attempt) {
                    (recorded, Left::Gone) => {
                        self.customers.remove(id);
                        return Reply::Recorded(recorded);
                    }
                    (recorded, Left::Kept) => recorded,
                }
            }
        };
        if let Recorded::Applied { .. } = recorded {
            customer.written_ms = at_ms;
        }
        Reply::Recorded(recorded)
    }

    /// Lets go of every customer whose hash has expired by `at_ms`, as Redis
    /// would: memory holds only customers with habits. A sweep visits every
    /// customer, so one comes only after a whole key TTL of history time
    /// and as many attempts as there are customers: at most one visit per
    /// attempt, however short the TTL.
    fn sweep_expired(&mut self, at_ms: i64) {
        self.sweep.attempts += 1;
        let ttl = self.rules.key_ttl;
        if self.sweep.attempts < self.customers.len() || !outlived(self.sweep.at_ms, at_ms, ttl) {
            return;
        }
        self.customers
            .retain(|customer| !outlived(customer.written_ms, at_ms, ttl));
        self.sweep = Sweep { at_ms, attempts: 0 };
    }

    fn merchant(&mut self, index: u32) -> &mut Merchant {
        let index = index as usize;
        if self.merchants.len() <= index {
            self.merchants.resize_with(index + 1, Merchant::default);
        }
        &mut self.merchants[index]
    }
}
