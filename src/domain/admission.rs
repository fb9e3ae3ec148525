//! The per-merchant admission budget: at most `budget` new customer hashes per
//! window, so sticky keys can never crowd out the other routing state that
//! shares the Redis.
//!
//! Two window counters (current and previous) give a sliding estimate
//! `current + previous × (1 − elapsed fraction of the current window)`. A new
//! customer is admitted only while the estimate, counting it, stays within
//! the budget.
//!
//! Both counters live in one Redis hash per merchant so one script can roll
//! the window and check-and-increment atomically on one key (Cluster-safe);
//! that script, `storage/scripts/admit.lua`, mirrors [`decide`] and
//! `src/storage/scripts/tests.rs` holds the two equal.

use std::collections::HashMap;

use super::ids::MerchantId;

/// The admission budgets: a default and per-merchant overrides.
///
/// Overrides are keyed by validated merchant ids, so an override can only
/// name a merchant a request could name: one that breaks the id rule is a
/// configuration error, not a budget that silently never applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budgets {
    pub default: u64,
    pub overrides: HashMap<MerchantId, u64>,
}

impl Budgets {
    pub fn for_merchant(&self, merchant: &MerchantId) -> u64 {
        self.overrides
            .get(merchant)
            .copied()
            .unwrap_or(self.default)
    }
}

/// Why a new customer was not admitted (nothing was written either way).
/// Kept apart because they call for different fixes: a spent budget is one
/// merchant sending more new customers than it was given room for, an
/// engaged memory guard is a Redis node running out of room for everyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionRefusal {
    /// The merchant's admission budget for the window is spent.
    Budget,
    /// The memory guard is engaged on the Redis node that would hold the
    /// customer's hash (`super::memory_guard`).
    MemoryGuard,
}

/// The counters stored for a merchant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCounters {
    /// Window index: `now_ms / window_ms`.
    pub window: i64,
    pub current: u64,
    pub previous: u64,
}

/// The outcome of one admission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub admitted: bool,
    /// The counters after the request (rolled, and incremented if admitted).
    pub counters: WindowCounters,
}

/// The sliding estimate of admissions over the last window length.
pub fn estimate(current: u64, previous: u64, elapsed_fraction: f64) -> f64 {
    current as f64 + previous as f64 * (1.0 - elapsed_fraction)
}

/// Decides one admission at `now_ms` against `stored` counters.
///
/// A caller whose clock runs behind the stored window keeps the stored window
/// (elapsed clamps to 0) rather than rolling back; a counter never decreases
/// within its window, so concurrent callers can never push past the budget.
pub fn decide(
    stored: Option<WindowCounters>,
    now_ms: i64,
    window_ms: i64,
    budget: u64,
) -> Decision {
    let window_ms = window_ms.max(1);
    let now_window = now_ms.div_euclid(window_ms);
    let counters = match stored {
        None => WindowCounters {
            window: now_window,
            current: 0,
            previous: 0,
        },
        Some(s) if s.window >= now_window => s,
        Some(s) if s.window == now_window - 1 => WindowCounters {
            window: now_window,
            current: 0,
            previous: s.current,
        },
        Some(_) => WindowCounters {
            window: now_window,
            current: 0,
            previous: 0,
        },
    };
    let elapsed = (now_ms - counters.window * window_ms).clamp(0, window_ms);
    let fraction = elapsed as f64 / window_ms as f64;
    let admitted = estimate(counters.current, counters.previous, fraction) + 1.0 <= budget as f64;
    let current = if admitted {
        counters.current + 1
    } else {
        counters.current
    };
    Decision {
        admitted,
        counters: WindowCounters {
            current,
            ..counters
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const W: i64 = 1_000;

    fn run(budget: u64, times: &[i64]) -> (usize, Option<WindowCounters>) {
        let mut stored = None;
        let mut admitted = 0;
        for &now in times {
            let d = decide(stored, now, W, budget);
            admitted += usize::from(d.admitted);
            stored = Some(d.counters);
        }
        (admitted, stored)
    }

    #[test]
    fn a_fresh_window_admits_exactly_the_budget() {
        assert_eq!(run(3, &[10, 20, 30, 40, 50]).0, 3);
    }

    #[test]
    fn a_budget_of_zero_admits_nobody() {
        assert_eq!(run(0, &[10, 20]).0, 0);
    }

    #[test]
    fn the_previous_window_weighs_by_what_is_left_of_the_current() {
        // 4 admitted in window 0; at 25% into window 1 they still weigh 3.
        let stored = Some(WindowCounters {
            window: 0,
            current: 4,
            previous: 0,
        });
        let d = decide(stored, W + 250, W, 4);
        assert!(d.admitted, "3 + 1 <= 4");
        assert_eq!(
            d.counters,
            WindowCounters {
                window: 1,
                current: 1,
                previous: 4
            }
        );
        assert!(
            !decide(Some(d.counters), W + 250, W, 4).admitted,
            "3 + 1 + 1 > 4"
        );
        assert_eq!(estimate(1, 4, 0.25), 4.0);
    }

    #[test]
    fn an_idle_merchant_starts_over() {
        let stored = Some(WindowCounters {
            window: 0,
            current: 9,
            previous: 9,
        });
        let d = decide(stored, 5 * W, W, 1);
        assert_eq!(
            d.counters,
            WindowCounters {
                window: 5,
                current: 1,
                previous: 0
            }
        );
    }

    #[test]
    fn a_lagging_clock_never_rolls_the_window_back() {
        let stored = Some(WindowCounters {
            window: 3,
            current: 2,
            previous: 0,
        });
        let d = decide(stored, 2 * W + 1, W, 2);
        assert!(!d.admitted);
        assert_eq!(d.counters.window, 3);
    }

    #[test]
    fn overrides_win_over_the_default() {
        let budgets = Budgets {
            default: 5,
            overrides: HashMap::from([(MerchantId::parse("m_1").unwrap(), 0)]),
        };
        assert_eq!(budgets.for_merchant(&MerchantId::parse("m_1").unwrap()), 0);
        assert_eq!(budgets.for_merchant(&MerchantId::parse("m2").unwrap()), 5);
    }

    proptest! {
        #[test]
        fn the_estimate_never_exceeds_the_budget(
            budget in 0u64..20,
            mut times in proptest::collection::vec(0i64..5 * W, 1..80),
        ) {
            times.sort_unstable();
            let mut stored = None;
            for now in times {
                let d = decide(stored, now, W, budget);
                let c = d.counters;
                let fraction = (now - c.window * W).clamp(0, W) as f64 / W as f64;
                prop_assert!(estimate(c.current, c.previous, fraction) <= budget as f64);
                stored = Some(c);
            }
        }

        #[test]
        fn no_window_admits_more_than_the_budget(
            budget in 0u64..20,
            mut times in proptest::collection::vec(0i64..5 * W, 1..80),
        ) {
            times.sort_unstable();
            let mut stored = None;
            let mut per_window = HashMap::new();
            for now in times {
                let d = decide(stored, now, W, budget);
                if d.admitted {
                    *per_window.entry(d.counters.window).or_insert(0u64) += 1;
                }
                stored = Some(d.counters);
            }
            prop_assert!(per_window.values().all(|n| *n <= budget));
        }
    }
}
