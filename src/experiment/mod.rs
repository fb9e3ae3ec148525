//! The experiment counts' engine (contract v1.2 §4): RecordOutcome counts
//! each outcome of a payment GetPin named a connector for in its (tenant,
//! merchant)'s group (treated, holdout, shadow) and UTC day, and GetUplift
//! reads them back, within the call's tenant, as the uplift of treated
//! over holdout. Two tenants with the same merchant id never share a count
//! (contract v1.2, "Tenants").
//!
//! Kept in two tiers, as the circuit breaker's counts are: tier 1 is this
//! process's memory ([`tally`]), where RecordOutcome adds its outcome
//! without a Redis round trip; tier 2 is Redis, where every instance's
//! counts meet: each shard's counts log (`sticky_exp_l{S}`), then one hash
//! per (tenant, merchant) and UTC day (`sticky_exp_*`). One background
//! task ([`cycle`]) pushes the tallies onto the logs every
//! [`cycle::TICK`], and once more when the service stops, and adds the
//! logs into the hashes a batch at a time ([`compact`]); GetUplift reads
//! both.
//!
//! Which outcome counts, and in which group, is the domain's rule
//! (`domain::rollout::cell`); this engine counts what it is given.

mod compact;
mod cycle;
pub mod days;
mod tally;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::domain::ids::MerchantId;
use crate::domain::rollout::{Group, Split};
use crate::domain::tenant::Tenant;
use crate::domain::uplift::{GroupCounts, Uplift};
use crate::storage::{ExperimentCounts, RedisStore, StorageError};
use crate::telemetry::{LogThrottle, Metrics};
use tally::Tally;

pub use crate::domain::uplift::{DEFAULT_DAYS, MAX_DAYS};

/// Every (tenant, merchant)'s experiment counts.
pub struct Experiments {
    store: RedisStore,
    /// The TTL of each day's hash, renewed by every flush.
    retention: Duration,
    metrics: Arc<Metrics>,
    tally: Tally,
    /// Where each shard's log compaction stands, as this instance sees it.
    compactions: compact::Compactions,
    /// One batch added up at a time, off the runtime's workers.
    batch_cpu: tokio::sync::Semaphore,
    /// The tick's own CPU work, one at a time (`process::off_the_workers`).
    tick_cpu: tokio::sync::Semaphore,
    /// Failed reads and writes: a line every 30 s at most.
    failure_log: LogThrottle,
}

impl Experiments {
    pub fn new(
        store: RedisStore,
        retention: Duration,
        batch_age: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store,
            retention,
            metrics,
            tally: Tally::new(tally::MAX_MERCHANTS),
            compactions: compact::Compactions::new(batch_age),
            batch_cpu: tokio::sync::Semaphore::new(1),
            tick_cpu: tokio::sync::Semaphore::new(1),
            failure_log: LogThrottle::new(cycle::LOG_FAILURES_EVERY),
        }
    }

    /// Starts the background cycle. It ends when `stop` is cancelled, after
    /// one last flush, so the counts of the calls answered before a
    /// shutdown still reach Redis; await the handle before closing the store.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(cycle::run(self.clone(), stop))
    }

    /// Counts one answered RecordOutcome in `group` (and `split`, for
    /// treated and shadow), today (UTC), as a success or a gateway failure.
    /// No Redis call: a hash, a lock, an add; the background cycle writes
    /// it within a tick. A treated or shadow outcome without a split is
    /// none [`crate::domain::rollout::cell`] makes, and is not counted.
    pub fn count(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        group: Group,
        split: Option<Split>,
        success: bool,
    ) {
        let Some(field) = field_index(group, split, success) else {
            return;
        };
        self.tally.add(tenant, merchant, days::today(), field);
        // No tenant in the labels (contract v1.2, "Tenants").
        self.metrics.experiment_outcome(group, success);
    }

    /// The uplift of `tenant`'s `merchant` over the last `days` UTC days,
    /// today included, read from Redis (every instance's counts flushed so
    /// far).
    pub async fn uplift(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        days: u32,
        deadline: Instant,
    ) -> Result<Uplift, StorageError> {
        let wanted = days::last_days(days, crate::process::unix_millis());
        let read = self
            .store
            .read_experiment(tenant, merchant, &wanted, deadline)
            .await
            .inspect_err(|error| self.io_failed("read", error))?;
        let mut sum = ExperimentCounts::default();
        for (_, counts) in &read {
            sum.add(counts);
        }
        Ok(uplift_of(&sum))
    }

    /// Writes every tally now (the cycle does it every tick).
    #[cfg(test)]
    async fn flush_now(self: &Arc<Self>) {
        cycle::flush(self, false, Duration::ZERO).await;
    }
}

/// The index in `domain::keys::EXPERIMENT_FIELDS` of the field that counts
/// an outcome of `group` and `split`: `<group>:<split>:<outcome>`.
fn field_index(group: Group, split: Option<Split>, success: bool) -> Option<usize> {
    let cell = match (group, split) {
        (Group::Treated, Some(Split::Followed)) => 0,
        (Group::Treated, Some(Split::Overridden)) => 2,
        // The holdout has no split: GetPin pinned nothing there.
        (Group::Holdout, _) => 4,
        (Group::Shadow, Some(Split::Followed)) => 6,
        (Group::Shadow, Some(Split::Overridden)) => 8,
        (Group::Treated | Group::Shadow, None) => return None,
    };
    Some(cell + usize::from(!success))
}

/// The three groups' counts in a sum of days' counts, and their uplift.
pub fn uplift_of(counts: &ExperimentCounts) -> Uplift {
    let c = &counts.counts;
    let split = |followed_s: u64, followed_f: u64, overridden_s: u64, overridden_f: u64| {
        let followed = followed_s.saturating_add(followed_f);
        let overridden = overridden_s.saturating_add(overridden_f);
        GroupCounts {
            outcomes: followed.saturating_add(overridden),
            successes: followed_s.saturating_add(overridden_s),
            followed,
            overridden,
        }
    };
    let treated = split(c[0], c[1], c[2], c[3]);
    let holdout = GroupCounts {
        outcomes: c[4].saturating_add(c[5]),
        successes: c[4],
        followed: 0,
        overridden: 0,
    };
    let shadow = split(c[6], c[7], c[8], c[9]);
    Uplift::from(treated, holdout, shadow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::keys::EXPERIMENT_FIELDS;

    #[test]
    fn each_cell_counts_in_its_own_field() {
        let mut seen = std::collections::BTreeSet::new();
        for (group, g) in [
            (Group::Treated, "t"),
            (Group::Holdout, "h"),
            (Group::Shadow, "s"),
        ] {
            let splits: &[(Option<Split>, &str)] = match group {
                Group::Holdout => &[(None, "-")],
                _ => &[(Some(Split::Followed), "f"), (Some(Split::Overridden), "o")],
            };
            for &(split, s) in splits {
                for (success, o) in [(true, "s"), (false, "f")] {
                    let at = field_index(group, split, success).unwrap();
                    assert_eq!(EXPERIMENT_FIELDS[at], format!("{g}:{s}:{o}"));
                    seen.insert(at);
                }
            }
        }
        assert_eq!(seen.len(), EXPERIMENT_FIELDS.len());
        assert_eq!(field_index(Group::Treated, None, true), None);
        assert_eq!(
            field_index(Group::Holdout, Some(Split::Followed), false),
            field_index(Group::Holdout, None, false)
        );
    }

    #[test]
    fn the_groups_are_summed_from_their_fields() {
        let counts = ExperimentCounts {
            counts: [80, 20, 5, 15, 50, 50, 1, 2, 3, 4],
        };
        let uplift = uplift_of(&counts);
        assert_eq!(
            uplift.treated,
            GroupCounts {
                outcomes: 120,
                successes: 85,
                followed: 100,
                overridden: 20
            }
        );
        assert_eq!(
            uplift.holdout,
            GroupCounts {
                outcomes: 100,
                successes: 50,
                followed: 0,
                overridden: 0
            }
        );
        assert_eq!(
            uplift.shadow,
            GroupCounts {
                outcomes: 10,
                successes: 4,
                followed: 3,
                overridden: 7
            }
        );
        assert!(uplift.enough_data);
        assert!((uplift.follow_rate - 100.0 / 120.0).abs() < 1e-12);
        assert!((uplift.difference - (85.0 / 120.0 - 0.5)).abs() < 1e-12);
        assert!(uplift.ci_low < uplift.difference && uplift.difference < uplift.ci_high);
    }

    /// The engine on real Redis: counts flushed, summed over today, and a
    /// flush that wrote nothing (the user may not PEXPIRE) kept for the
    /// next one.
    #[test]
    fn counts_reach_redis_and_a_refused_flush_is_kept_for_the_next() {
        use crate::storage::{RedisSettings, Secret};
        use test_support::redis_server::{RedisServer, SERVICE_PASSWORD, SERVICE_USER, redis_cli};
        let redis = RedisServer::start();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let settings = RedisSettings {
            url: redis.url().into(),
            username: Some(SERVICE_USER.into()),
            password: Some(Secret::new(SERVICE_PASSWORD)),
            tls: None,
            pool_size: 1,
            command_timeout: Duration::from_secs(1),
            queue_limit: 1024,
        };
        runtime.block_on(async {
            let metrics = Arc::new(Metrics::new().unwrap());
            let tasks = tokio_util::task::TaskTracker::new();
            let store = RedisStore::connect(&settings, &tasks, metrics.clone()).unwrap();
            assert!(store.wait_connected(Duration::from_secs(5)).await);
            let engine = Arc::new(Experiments::new(
                store.clone(),
                Duration::from_secs(3_600),
                Duration::from_secs(1),
                metrics.clone(),
            ));
            let m = MerchantId::parse("m_1").unwrap();
            let d = &Tenant::DEFAULT;
            let deadline = || Instant::now() + Duration::from_secs(5);
            for _ in 0..3 {
                engine.count(d, &m, Group::Treated, Some(Split::Followed), true);
            }
            engine.count(d, &m, Group::Treated, Some(Split::Overridden), false);
            engine.count(d, &m, Group::Holdout, None, true);
            engine.count(d, &m, Group::Holdout, None, false);
            engine.flush_now().await;
            let uplift = engine.uplift(d, &m, 7, deadline()).await.unwrap();
            let expected = GroupCounts {
                outcomes: 4,
                successes: 3,
                followed: 3,
                overridden: 1,
            };
            assert_eq!(uplift.treated, expected);
            assert_eq!((uplift.holdout.outcomes, uplift.holdout.successes), (2, 1));
            assert_eq!(uplift.shadow, GroupCounts::default());

            // Another tenant's merchant of the same id counts apart.
            let acme = Tenant::parse("acme").unwrap();
            engine.count(&acme, &m, Group::Holdout, None, true);
            engine.count(&acme, &m, Group::Holdout, None, true);
            engine.count(&acme, &m, Group::Treated, Some(Split::Followed), false);
            engine.flush_now().await;
            let theirs = engine.uplift(&acme, &m, 7, deadline()).await.unwrap();
            assert_eq!((theirs.holdout.outcomes, theirs.holdout.successes), (2, 2));
            assert_eq!((theirs.treated.outcomes, theirs.treated.successes), (1, 0));
            let ours = engine.uplift(d, &m, 7, deadline()).await.unwrap();
            assert_eq!(ours.treated, expected);
            assert_eq!((ours.holdout.outcomes, ours.holdout.successes), (2, 1));

            redis_cli(redis.port, &["ACL", "SETUSER", SERVICE_USER, "-pexpire"]);
            engine.count(d, &m, Group::Shadow, Some(Split::Overridden), true);
            engine.flush_now().await;
            let text = metrics.render();
            assert!(
                text.contains("sticky_routing_experiment_io_failures_total{op=\"flush\"} 1"),
                "{text}"
            );
            redis_cli(redis.port, &["ACL", "SETUSER", SERVICE_USER, "+pexpire"]);
            engine.flush_now().await;
            let uplift = engine.uplift(d, &m, 1, deadline()).await.unwrap();
            assert_eq!(uplift.treated, expected);
            assert_eq!(
                (uplift.shadow.outcomes, uplift.shadow.overridden),
                (1, 1),
                "the refused flush's count came with the next"
            );
            let text = metrics.render();
            assert!(
                text.contains(
                    "sticky_routing_experiment_outcomes_total{group=\"treated\",outcome=\"success\"} 3"
                ),
                "{text}"
            );

            // A second on (the batch age), the ticks add the log into the
            // hashes; every read on the way counts the same.
            let shard = crate::domain::shards::shard_of(d, &m);
            let before = engine.uplift(d, &m, 1, deadline()).await.unwrap();
            let started = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                engine.flush_now().await;
                assert_eq!(engine.uplift(d, &m, 1, deadline()).await.unwrap(), before);
                let state = store
                    .append_experiment(shard, None, Duration::from_secs(3_600), 1, deadline())
                    .await
                    .unwrap();
                if state.frames == 0 && state.batch > 0 {
                    break;
                }
                assert!(started.elapsed() < Duration::from_secs(10), "{state:?}");
            }
            store.quit().await;
        });
    }
}
