//! The report on real Redis while the logs are being added into the
//! hashes: every read counts each outcome once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use test_support::redis_server::{
    EXPORT_PASSWORD, EXPORT_USER, RedisServer, SERVICE_PASSWORD, SERVICE_USER,
};
use tokio_util::task::TaskTracker;

use super::*;
use crate::storage::{ExperimentEntry, RedisSettings, RedisStore, Secret};
use crate::telemetry::Metrics;

const DAY: u32 = 20261207;
const RETENTION: Duration = Duration::from_secs(3600);

fn settings(redis: &RedisServer) -> RedisSettings {
    RedisSettings {
        url: redis.url().into(),
        username: Some(SERVICE_USER.into()),
        password: Some(Secret::new(SERVICE_PASSWORD)),
        tls: None,
        pool_size: 2,
        command_timeout: Duration::from_secs(2),
        queue_limit: 1024,
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_report_counts_each_outcome_once_while_batches_are_added() {
    let redis = RedisServer::start();
    let settings = settings(&redis);
    let metrics = Arc::new(Metrics::new().unwrap());
    let store = RedisStore::connect(&settings, &TaskTracker::new(), metrics).unwrap();
    assert!(store.wait_connected(Duration::from_secs(5)).await);
    // 600 merchants in each of four shards: three chunks a shard. Half of
    // them twice, the second time in a frame of its own.
    let four: Vec<Shard> = Shard::all().take(4).collect();
    let mut merchants: Vec<MerchantId> = Vec::new();
    for shard in &four {
        merchants.extend(
            (0..)
                .map(|i| MerchantId::parse(&format!("m{i}")).unwrap())
                .filter(|m| shard_of(&Tenant::DEFAULT, m) == *shard)
                .take(600),
        );
    }
    let entry = |merchant: &MerchantId| ExperimentEntry {
        tenant: Tenant::DEFAULT,
        merchant: merchant.clone(),
        day: DAY,
        counts: ExperimentCounts {
            counts: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        },
    };
    for shard in Shard::all() {
        let of_shard: Vec<ExperimentEntry> = merchants
            .iter()
            .filter(|m| shard_of(&Tenant::DEFAULT, m) == shard)
            .map(entry)
            .collect();
        let half = of_shard.len() / 2;
        for frame in [&of_shard[..], &of_shard[..half]] {
            let frame = crate::storage::experiment_frame(frame);
            store
                .append_experiment(shard, frame, RETENTION, 1, deadline())
                .await
                .unwrap();
        }
    }
    let expected: u64 = merchants
        .iter()
        .map(|m| {
            let shard = shard_of(&Tenant::DEFAULT, m);
            let of_shard: Vec<&MerchantId> = merchants
                .iter()
                .filter(|o| shard_of(&Tenant::DEFAULT, o) == shard)
                .collect();
            let at = of_shard.iter().position(|o| *o == m).unwrap();
            if at < of_shard.len() / 2 { 2 } else { 1 }
        })
        .sum();

    let adder = tokio::spawn({
        let store = store.clone();
        async move {
            loop {
                let mut any = false;
                for shard in Shard::all() {
                    any |= store
                        .compact_experiment_step(shard, RETENTION, deadline())
                        .await
                        .unwrap()
                        .is_some();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                if !any {
                    return;
                }
            }
        }
    });
    // As the report runs: the export's read-only user.
    let export = RedisSettings {
        username: Some(EXPORT_USER.into()),
        password: Some(Secret::new(EXPORT_PASSWORD)),
        ..settings.clone()
    };
    let scanner = HashScanner::connect(&export, Duration::from_secs(5))
        .await
        .unwrap();
    let wanted = Wanted {
        tenant: &Tenant::DEFAULT,
        merchant: None,
        days: [DAY].into_iter().collect(),
    };
    let (mut reads, mut rescans) = (0, 0);
    loop {
        let done = adder.is_finished();
        let read = read_counts(&scanner, &wanted).await.unwrap();
        let total: u64 = read.by_merchant.values().map(|c| c.counts[0]).sum();
        assert_eq!(total, expected, "read {reads}");
        assert_eq!(read.by_merchant.len(), merchants.len());
        assert_eq!(read.unreadable, 0);
        reads += 1;
        rescans += read.rescans;
        if done {
            break;
        }
    }
    adder.await.unwrap();
    eprintln!("{reads} reads, {rescans} shards scanned again");
    assert!(reads > 2, "the batches were added before a second read");
    scanner.quit().await;
    store.quit().await;
}
