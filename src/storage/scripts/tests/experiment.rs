//! The experiment counts on real Redis, through the store's calls: a flush
//! adds into the day's hash and gives it the retention as its TTL, two
//! flushes add up, a read sums nothing it should not, and nothing is ever
//! written that could not be given its TTL.

use std::time::Duration;

use super::*;
use crate::domain::keys::EXPERIMENT_FIELDS;
use crate::domain::tenant::Tenant;
use crate::storage::ExperimentCounts;

const DAY: u32 = 20261202;
const RETENTION: Duration = Duration::from_secs(35 * 86_400);

fn merchant(m: &str) -> MerchantId {
    MerchantId::parse(m).unwrap()
}

fn counts(pairs: &[(&str, u64)]) -> ExperimentCounts {
    let mut counts = ExperimentCounts::default();
    for (field, n) in pairs {
        let at = EXPERIMENT_FIELDS.iter().position(|f| f == field).unwrap();
        counts.counts[at] = *n;
    }
    counts
}

impl Harness {
    fn flush_exp(
        &self,
        m: &str,
        day: u32,
        c: &ExperimentCounts,
        retention: Duration,
    ) -> Result<(), StorageError> {
        self.runtime.block_on(self.store.flush_experiment_day(
            &Tenant::DEFAULT,
            &merchant(m),
            day,
            c,
            retention,
            deadline(),
        ))
    }

    fn read_exp(&self, m: &str, days: &[u32]) -> Vec<(u32, ExperimentCounts)> {
        self.runtime
            .block_on(
                self.store
                    .read_experiment(&Tenant::DEFAULT, &merchant(m), days, deadline()),
            )
            .unwrap()
    }

    /// Every experiment day key in this Redis, after checking that each
    /// of the logs' keys (`sticky_exp_l{S}`, `sticky_exp_m{S}`) that is
    /// left has the retention as its TTL.
    fn experiment_keys(&self) -> Vec<String> {
        let (logs, days): (Vec<String>, Vec<String>) = self
            .keys_matching("sticky_exp_*")
            .into_iter()
            .partition(|key| keys::parse_experiment_log_key(key).is_some());
        self.assert_retention_ttls(&logs);
        days
    }

    /// Each of `keys` has [`RETENTION`] as its TTL, within the test's
    /// minute.
    fn assert_retention_ttls(&self, keys: &[String]) {
        let retention_ms = RETENTION.as_millis() as i64;
        for key in keys {
            let pttl = self.pttl(key);
            assert!(
                pttl > retention_ms - 60_000 && pttl <= retention_ms,
                "{key}: {pttl}"
            );
        }
    }
}

fn exp_key(m: &str, day: u32) -> String {
    keys::experiment_key(&Tenant::DEFAULT, &merchant(m), day)
        .as_str()
        .to_owned()
}

#[test]
fn flushes_add_into_the_days_hash_with_the_retention_as_ttl() {
    let h = Harness::new();
    let first = counts(&[("t:f:s", 3), ("t:o:f", 1), ("h:-:s", 2)]);
    h.flush_exp("m_1", DAY, &first, RETENTION).unwrap();
    // Another instance's counts of the same day add up.
    let second = counts(&[("t:f:s", 4), ("s:f:f", 5)]);
    h.flush_exp("m_1", DAY, &second, RETENTION).unwrap();
    // The next day and another merchant stay apart.
    h.flush_exp("m_1", DAY + 1, &counts(&[("h:-:f", 9)]), RETENTION)
        .unwrap();
    h.flush_exp("m", DAY, &counts(&[("t:f:s", 100)]), RETENTION)
        .unwrap();

    let key = exp_key("m_1", DAY);
    let tag = crate::domain::shards::shard_of(&Tenant::DEFAULT, &merchant("m_1")).tag();
    assert_eq!(key, format!("sticky_exp_{{{tag}}}m%5F1_20261202"));
    let stored = h.hash(&key);
    let expected: HashMap<String, i64> = [("t:f:s", 7), ("t:o:f", 1), ("h:-:s", 2), ("s:f:f", 5)]
        .into_iter()
        .map(|(f, n)| (f.to_owned(), n))
        .collect();
    assert_eq!(stored, expected);

    // The read answers in the days' order, a day without a hash as zeros.
    let read = h.read_exp("m_1", &[DAY + 1, DAY, DAY - 1]);
    let mut both = first;
    both.add(&second);
    assert_eq!(
        read,
        vec![
            (DAY + 1, counts(&[("h:-:f", 9)])),
            (DAY, both),
            (DAY - 1, ExperimentCounts::default()),
        ]
    );
    assert_eq!(h.read_exp("m_1", &[]), vec![]);

    // Every key has the retention as its TTL, renewed by every write.
    let keys = h.experiment_keys();
    assert_eq!(keys.len(), 3, "{keys:?}");
    h.assert_retention_ttls(&keys);
    h.flush_exp("m", DAY, &counts(&[("s:o:s", 1)]), Duration::from_secs(60))
        .unwrap();
    let pttl = h.pttl(&exp_key("m", DAY));
    assert!(pttl > 50_000 && pttl <= 60_000, "{pttl}");
}

#[test]
fn a_tenants_flush_writes_its_own_keys_with_the_retention_as_ttl() {
    let h = Harness::new();
    let acme = Tenant::parse("acme").unwrap();
    let m = merchant("m_1");
    let ours = counts(&[("t:f:s", 3)]);
    let theirs = counts(&[("t:f:s", 5), ("h:-:f", 2)]);
    h.flush_exp("m_1", DAY, &ours, RETENTION).unwrap();
    h.runtime
        .block_on(
            h.store
                .flush_experiment_day(&acme, &m, DAY, &theirs, RETENTION, deadline()),
        )
        .unwrap();

    let key = keys::experiment_key(&acme, &m, DAY);
    let tag = crate::domain::shards::shard_of(&acme, &m).tag();
    assert_eq!(
        key,
        format!("sticky_exp_{{{tag}}}%Tacme_m%5F1_20261202").as_str()
    );
    let mut keys = h.experiment_keys();
    keys.sort();
    let mut expected = vec![exp_key("m_1", DAY), key.as_str().to_owned()];
    expected.sort();
    assert_eq!(keys, expected);
    h.assert_retention_ttls(&keys);
    // Each tenant reads its own counts only.
    assert_eq!(h.read_exp("m_1", &[DAY]), vec![(DAY, ours)]);
    let read = h
        .runtime
        .block_on(h.store.read_experiment(&acme, &m, &[DAY], deadline()))
        .unwrap();
    assert_eq!(read, vec![(DAY, theirs)]);
    let other = Tenant::parse("Acme").unwrap();
    let read = h
        .runtime
        .block_on(h.store.read_experiment(&other, &m, &[DAY], deadline()))
        .unwrap();
    assert_eq!(read, vec![(DAY, ExperimentCounts::default())]);
}

#[test]
fn no_counts_send_nothing_and_a_foreign_value_stops_the_flush_with_nothing_written() {
    let h = Harness::new();
    h.flush_exp("m", DAY, &ExperimentCounts::default(), RETENTION)
        .unwrap();
    assert!(h.experiment_keys().is_empty());

    let key = exp_key("m", DAY);
    let mut arranged = HashMap::new();
    arranged.insert("t:f:s".to_owned(), 5);
    h.arrange(&key, &arranged);
    h.runtime.block_on(async {
        let _: () = h.inspect.hset(&key, ("t:o:s", "x")).await.unwrap();
    });
    let flushed = h.flush_exp("m", DAY, &counts(&[("t:f:s", 1), ("t:o:s", 1)]), RETENTION);
    assert!(
        matches!(flushed, Err(StorageError::ForeignValue { .. })),
        "{flushed:?}"
    );
    assert_eq!(h.raw(&key)["t:f:s"], b"5".to_vec(), "nothing was added");
    let read = h.runtime.block_on(h.store.read_experiment(
        &Tenant::DEFAULT,
        &merchant("m"),
        &[DAY],
        deadline(),
    ));
    assert!(
        matches!(read, Err(StorageError::ForeignValue { .. })),
        "{read:?}"
    );
}

/// One field per merchant-day (what sparse calls send) takes the short
/// path, without the HMGET check: it must refuse alike.
#[test]
fn a_lone_fields_foreign_value_or_key_of_another_type_is_refused_alike() {
    let h = Harness::new();
    let key = exp_key("m", DAY);
    h.runtime.block_on(async {
        let _: () = h.inspect.hset(&key, ("t:f:s", "x")).await.unwrap();
    });
    let flushed = h.flush_exp("m", DAY, &counts(&[("t:f:s", 1)]), RETENTION);
    assert!(
        matches!(flushed, Err(StorageError::ForeignValue { .. })),
        "{flushed:?}"
    );
    assert_eq!(h.raw(&key)["t:f:s"], b"x".to_vec(), "nothing was added");
    assert_eq!(h.pttl(&key), -1, "not even the TTL was touched");

    // A key of another type: the same refusal as with several fields.
    let other = exp_key("n", DAY);
    h.runtime.block_on(async {
        let _: () = h.inspect.set(&other, "v", None, None, false).await.unwrap();
    });
    let one = h.flush_exp("n", DAY, &counts(&[("t:f:s", 1)]), RETENTION);
    let two = h.flush_exp("n", DAY, &counts(&[("t:f:s", 1), ("t:o:s", 1)]), RETENTION);
    assert!(one.is_err(), "{one:?}");
    // (The same error but for the script's line it names.)
    let without_line = |e: String| e.split(", on @user_script").next().unwrap().to_owned();
    assert_eq!(
        without_line(format!("{one:?}")),
        without_line(format!("{two:?}"))
    );
    let value: String = h.runtime.block_on(h.inspect.get(&other)).unwrap();
    assert_eq!(value, "v");

    // And a good one adds, with the retention as its TTL.
    h.flush_exp("g", DAY, &counts(&[("t:f:s", 2)]), RETENTION)
        .unwrap();
    h.flush_exp("g", DAY, &counts(&[("t:f:s", 1)]), RETENTION)
        .unwrap();
    assert_eq!(h.raw(&exp_key("g", DAY))["t:f:s"], b"3".to_vec());
    h.assert_retention_ttls(&[exp_key("g", DAY)]);
}

#[test]
fn flushes_and_reads_work_on_cluster() {
    let cluster = test_support::redis_cluster::RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let settings = settings_for_url(cluster.url());
    runtime.block_on(async {
        let metrics = Arc::new(Metrics::new().unwrap());
        let store = RedisStore::connect(&settings, &TaskTracker::new(), metrics).unwrap();
        assert!(store.wait_connected(Duration::from_secs(10)).await);
        // Days whose keys land on different primaries.
        let m = merchant("shop-1");
        let days: Vec<u32> = (1..=20).map(|d| 20261100 + d).collect();
        for (n, day) in days.iter().enumerate() {
            let c = counts(&[("t:f:s", n as u64 + 1), ("h:-:f", 1)]);
            store
                .flush_experiment_day(&Tenant::DEFAULT, &m, *day, &c, RETENTION, deadline())
                .await
                .unwrap();
        }
        let read = store
            .read_experiment(&Tenant::DEFAULT, &m, &days, deadline())
            .await
            .unwrap();
        for (n, (day, c)) in read.iter().enumerate() {
            assert_eq!(*day, days[n]);
            assert_eq!(*c, counts(&[("t:f:s", n as u64 + 1), ("h:-:f", 1)]));
        }
        store.quit().await;
    });
}

#[test]
fn a_key_that_could_not_be_given_its_ttl_is_never_made() {
    let h = Harness::new();
    let revoke = ["ACL", "SETUSER", SERVICE_USER, "-pexpire"];
    test_support::redis_server::redis_cli(h._redis.port, &revoke);
    let flushed = h.flush_exp("m", DAY, &counts(&[("t:f:s", 1)]), RETENTION);
    assert!(
        matches!(
            flushed,
            Err(StorageError::Unavailable {
                why: crate::storage::NotApplied::Permission,
                ..
            })
        ),
        "{flushed:?}"
    );
    assert!(h.experiment_keys().is_empty(), "{:?}", h.experiment_keys());
}
