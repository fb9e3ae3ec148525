//! An independent model of `sticky-routing replay` (contract v1 rules,
//! v1.1 de-duplication, v1.2 §5 time and figures), written from the
//! contract and sharing no code with the service: what the figures of a
//! good history must be, exactly.

use std::collections::{BTreeMap, VecDeque};

use crate::support::replay::{HistoryRow, Tally};

/// The settings the model applies, as the replay takes them from
/// `STICKY_ROUTING_*`.
#[derive(Debug, Clone)]
pub(crate) struct ModelRules {
    pub key_ttl_ms: i64,
    pub cap: usize,
    pub min_pin_count: i64,
    /// With `--admission`: the window and the budgets.
    pub admission: Option<Budgets>,
}

#[derive(Debug, Clone)]
pub(crate) struct Budgets {
    pub window_ms: i64,
    pub default: u64,
    pub overrides: BTreeMap<String, u64>,
}

/// One customer's hash: combos, the time of its last write, and the last 8
/// attempt ids that wrote something, oldest first.
#[derive(Debug, Default)]
struct Customer {
    fields: BTreeMap<String, i64>,
    written_ms: i64,
    attempts: VecDeque<String>,
    /// Every attempt id that wrote to this hash since it was created (only
    /// to tell which repeats the limit of 8 let through).
    ever: Vec<String>,
}

/// A merchant's two admission windows: (window index, current, previous).
type Windows = (i64, u64, u64);

/// How often each rule decided something, so that a test can require its
/// history to exercise every one.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Exercised {
    /// A customer's habits were gone because `at` passed its last write
    /// plus the TTL.
    pub expired: u64,
    /// A customer's habits survived a gap of exactly the TTL or a little
    /// less (at least half of it).
    pub survived_long_gap: u64,
    /// Combos the cap removed.
    pub pruned: u64,
    /// A prune chose between combos of the same count by name.
    pub prune_ties: u64,
    /// A prefix had a combo with a positive count below `MIN_PIN_COUNT`
    /// and no pin.
    pub below_min: u64,
    /// A pin chose between candidates of the same count by name.
    pub pin_ties: u64,
    pub duplicates: u64,
    /// A repeat of an attempt id that wrote to this very hash, which no
    /// longer remembers it (8 others came since): applied again.
    pub forgotten_repeats: u64,
    /// A failure took the customer's last combo, and the hash.
    pub emptied: u64,
    /// A failure on a combo the customer does not have.
    pub ignored: u64,
    pub not_admitted: u64,
    /// Attempts of rows with `count` > 1.
    pub counted: u64,
}

/// The replay as the contract states it, row by row.
pub(crate) struct Model {
    rules: ModelRules,
    customers: BTreeMap<(String, String), Customer>,
    windows: BTreeMap<String, Windows>,
    now_ms: Option<i64>,
    pub overall: Tally,
    pub merchants: BTreeMap<String, Tally>,
    pub exercised: Exercised,
}

impl Model {
    pub fn new(rules: ModelRules) -> Self {
        Self {
            rules,
            customers: BTreeMap::new(),
            windows: BTreeMap::new(),
            now_ms: None,
            overall: Tally::default(),
            merchants: BTreeMap::new(),
            exercised: Exercised::default(),
        }
    }

    /// One good row: its time (its `at`, or one second after the row
    /// before, the first at 0), then each of its attempts in turn.
    pub fn row(&mut self, row: &HistoryRow) {
        let at = match (row.at.ms(), self.now_ms) {
            (Some(at), previous) => {
                assert!(previous.is_none_or(|p| p <= at), "rows out of order");
                at
            }
            (None, Some(previous)) => previous + 1_000,
            (None, None) => 0,
        };
        self.now_ms = Some(at);
        for _ in 0..row.count {
            if row.count > 1 {
                self.exercised.counted += 1;
            }
            self.attempt(row, at);
        }
    }

    /// Customers whose habits have not expired at the last row's time.
    pub fn customers_with_habits(&self) -> usize {
        let now = self.now_ms.unwrap_or_default();
        self.customers
            .values()
            .filter(|c| now - c.written_ms <= self.rules.key_ttl_ms)
            .count()
    }

    fn attempt(&mut self, row: &HistoryRow, at: i64) {
        let key = (row.merchant.clone(), row.customer.trim().to_owned());
        let attempt_id = row
            .attempt_id
            .as_deref()
            .map(str::trim)
            .filter(|id| !id.is_empty());
        if let Some(customer) = self.customers.get(&key) {
            let gap = at - customer.written_ms;
            if gap > self.rules.key_ttl_ms {
                self.customers.remove(&key);
                self.exercised.expired += 1;
            } else if gap * 2 >= self.rules.key_ttl_ms {
                self.exercised.survived_long_gap += 1;
            }
        }
        if let (Some(id), Some(customer)) = (attempt_id, self.customers.get(&key)) {
            if customer.attempts.iter().any(|a| a == id) {
                self.overall.duplicates += 1;
                self.merchants
                    .entry(row.merchant.clone())
                    .or_default()
                    .duplicates += 1;
                self.exercised.duplicates += 1;
                return;
            }
            if customer.ever.iter().any(|a| a == id) {
                self.exercised.forgotten_repeats += 1;
            }
        }
        let pin = self.pin(&key, &row.prefix());
        let merchant = self.merchants.entry(row.merchant.clone()).or_default();
        merchant.attempt(pin.as_deref(), &row.connector, row.success);
        self.overall
            .attempt(pin.as_deref(), &row.connector, row.success);
        let wrote = if row.success {
            self.success(&key, &row.field(), at)
        } else {
            self.failure(&key, &row.field(), at)
        };
        if let (true, Some(id)) = (wrote, attempt_id)
            && let Some(customer) = self.customers.get_mut(&key)
        {
            customer.ever.push(id.to_owned());
            customer.attempts.push_back(id.to_owned());
            if customer.attempts.len() > 8 {
                customer.attempts.pop_front();
            }
        }
    }

    /// GetPin with no eligible list and no scores: the prefix's combos
    /// counting at least `MIN_PIN_COUNT`, the highest count, ties to the
    /// bytewise-smallest connector.
    fn pin(&mut self, key: &(String, String), prefix: &str) -> Option<String> {
        let customer = self.customers.get(key)?;
        let mut candidates: Vec<(i64, &str)> = Vec::new();
        let mut below_min = false;
        for (field, count) in &customer.fields {
            let Some(connector) = field.strip_prefix(prefix) else {
                continue;
            };
            if *count >= self.rules.min_pin_count {
                candidates.push((*count, connector));
            } else if *count > 0 {
                below_min = true;
            }
        }
        // Highest count first; on a tie the smaller connector.
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.as_bytes().cmp(b.1.as_bytes())));
        if candidates.len() > 1 && candidates[0].0 == candidates[1].0 {
            self.exercised.pin_ties += 1;
        }
        if candidates.is_empty() && below_min {
            self.exercised.below_min += 1;
        }
        candidates.first().map(|(_, c)| (*c).to_owned())
    }

    /// A success: +1 (a new customer first needs admission with
    /// `--admission`), then the cap; `true` when it wrote.
    fn success(&mut self, key: &(String, String), field: &str, at: i64) -> bool {
        if !self.customers.contains_key(key) && !self.admit(&key.0, at) {
            self.exercised.not_admitted += 1;
            return false;
        }
        let cap = self.rules.cap;
        let customer = self.customers.entry(key.clone()).or_default();
        customer.written_ms = at;
        let is_new = !customer.fields.contains_key(field);
        *customer.fields.entry(field.to_owned()).or_default() += 1;
        if is_new && customer.fields.len() > cap {
            let mut others: Vec<(i64, String)> = customer
                .fields
                .iter()
                .filter(|(f, _)| f.as_str() != field)
                .map(|(f, c)| (*c, f.clone()))
                .collect();
            // Lowest count first, ties bytewise (String orders bytewise).
            others.sort();
            let excess = customer.fields.len() - cap;
            if others.get(excess).map(|o| o.0) == Some(others[excess - 1].0) {
                self.exercised.prune_ties += 1;
            }
            for (_, victim) in others.into_iter().take(excess) {
                customer.fields.remove(&victim);
                self.exercised.pruned += 1;
            }
        }
        true
    }

    /// A gateway failure: −1 on a combo the customer has, a combo at 0
    /// goes, a hash without combos goes; `true` when it wrote.
    fn failure(&mut self, key: &(String, String), field: &str, at: i64) -> bool {
        let Some(customer) = self.customers.get_mut(key) else {
            self.exercised.ignored += 1;
            return false;
        };
        let Some(count) = customer.fields.get_mut(field) else {
            self.exercised.ignored += 1;
            return false;
        };
        *count -= 1;
        if *count == 0 {
            customer.fields.remove(field);
        }
        if customer.fields.is_empty() {
            self.customers.remove(key);
            self.exercised.emptied += 1;
            // The hash is gone, and the attempt with it.
            return false;
        }
        customer.written_ms = at;
        true
    }

    /// The merchant's budget, by `at`: at most `budget` new customers by
    /// the estimate `current + previous × (1 − elapsed fraction)`,
    /// computed exactly (in integers, times the window).
    fn admit(&mut self, merchant: &str, at: i64) -> bool {
        let Some(budgets) = &self.rules.admission else {
            return true;
        };
        let window = budgets.window_ms;
        let budget = budgets
            .overrides
            .get(merchant)
            .copied()
            .unwrap_or(budgets.default);
        let index = at.div_euclid(window);
        let (current, previous) = match self.windows.get(merchant) {
            Some(&(w, current, previous)) if w == index => (current, previous),
            Some(&(w, current, _)) if w == index - 1 => (0, current),
            _ => (0, 0),
        };
        let elapsed = at - index * window;
        let estimate_times_window = i128::from(current) * i128::from(window)
            + i128::from(previous) * i128::from(window - elapsed);
        let admitted =
            estimate_times_window + i128::from(window) <= i128::from(budget) * i128::from(window);
        let current = current + u64::from(admitted);
        self.windows
            .insert(merchant.to_owned(), (index, current, previous));
        admitted
    }
}
