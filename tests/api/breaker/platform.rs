//! The breaker and the experiment counts at a platform's cardinality
//! (issue 41): 20,000 merchants over three tenants, every RecordOutcome
//! carrying `pin_connector`, single node and Cluster. No call fails, the
//! service stays SERVING throughout, and the counts are exact, in Redis
//! (the breaker's counts log, the experiment's counts log) and in the windows
//! GetConnectorHealth answers from: the background work is one script per
//! shard per tick, on its own connections, however many merchants have
//! counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rstest::rstest;
use sticky_routing::domain::breaker::BreakerSettings;
use sticky_routing::domain::keys::{EXPERIMENT_FIELDS, parse_experiment_key};
use sticky_routing::storage::{experiment_unadded, read_log};
use sticky_routing::transport::pb;

use super::health;
use crate::support::*;

const MERCHANTS: usize = 20_000;
const TENANTS: [&str; 3] = ["", "acme", "globex"];
const SERVICE: &str = "sticky_routing.v1.StickyRouting";

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_merchants_fail_no_call_and_count_exactly(#[case] topology: Topology) {
    let started = std::time::Instant::now();
    let app = spawn_app_on(topology, |s| {
        s.breaker = Some(BreakerSettings::DEFAULT);
    })
    .await;
    app.wait_until_ready(true).await;

    // Readiness, polled all along.
    let not_serving = Arc::new(AtomicU64::new(0));
    let polling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watch = {
        let (health, not_serving, polling) =
            (app.health.clone(), not_serving.clone(), polling.clone());
        tokio::spawn(async move {
            while polling.load(Ordering::Relaxed) {
                if health_status(&health, SERVICE).await != 1 {
                    not_serving.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let failures = Arc::new(AtomicU64::new(0));
    let mut calls = tokio::task::JoinSet::new();
    let lanes = 64;
    for lane in 0..lanes {
        let (api, failures) = (app.api.clone(), failures.clone());
        calls.spawn(async move {
            let mut errors = Vec::new();
            for i in (lane..MERCHANTS).step_by(lanes) {
                let gateway_failure = i % 5 == 0;
                let result = if gateway_failure {
                    pb::Outcome::GatewayFailure
                } else {
                    pb::Outcome::Success
                };
                let mut message = outcome(&format!("pm{i}"), &format!("c{i}"), "A", result);
                message.pin_connector = "A".into();
                let mut request = tonic::Request::new(message);
                let tenant = TENANTS[i % TENANTS.len()];
                if !tenant.is_empty() {
                    request
                        .metadata_mut()
                        .insert("x-tenant-id", tenant.parse().unwrap());
                }
                failures.fetch_add(u64::from(gateway_failure), Ordering::Relaxed);
                if let Err(status) = api.clone().record_outcome(request).await {
                    errors.push(status);
                }
            }
            errors
        });
    }
    let mut errors = Vec::new();
    while let Some(lane) = calls.join_next().await {
        errors.extend(lane.unwrap());
    }
    // The counts of the last calls reach Redis within a tick or two.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    polling.store(false, Ordering::Relaxed);
    watch.await.unwrap();
    assert!(
        errors.is_empty(),
        "{} calls failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(
        not_serving.load(Ordering::Relaxed),
        0,
        "health left SERVING"
    );

    // Every count, exactly: the breaker's counts log and the experiment's
    // treated-and-followed outcomes (mode on, no holdout).
    let keys = app.keys().await;
    let logs: Vec<String> = keys
        .iter()
        .filter(|k| k.starts_with("sticky_brk_l{"))
        .cloned()
        .collect();
    let days: Vec<String> = keys
        .iter()
        .filter(|k| parse_experiment_key(k).is_some())
        .cloned()
        .collect();
    let experiment_logs: Vec<String> = keys
        .iter()
        .filter(|k| k.starts_with("sticky_exp_l{"))
        .cloned()
        .collect();
    let (mut calls, mut failed) = (0u64, 0u64);
    let mut merchants = std::collections::HashSet::new();
    for key in &logs {
        let bytes: Vec<u8> = fred::interfaces::KeysInterface::get(&app.inspect, key.as_str())
            .await
            .unwrap();
        let read = read_log(&bytes);
        assert_eq!(read.unreadable, 0);
        assert_eq!(read.consumed, bytes.len() as u64, "whole frames only");
        for record in read.records {
            calls += record.counts.calls;
            failed += record.counts.failures;
            merchants.insert((record.tenant, record.merchant));
        }
    }
    let mut outcomes = [0u64; EXPERIMENT_FIELDS.len()];
    // The experiment's log: no batch of it is added within the test (a
    // batch waits a minute), so all of it is unadded.
    for key in &experiment_logs {
        let meta = key.replacen("sticky_exp_l{", "sticky_exp_m{", 1);
        let fields: std::collections::HashMap<String, String> =
            fred::interfaces::HashesInterface::hgetall(&app.inspect, meta.as_str())
                .await
                .unwrap();
        assert!(
            !fields.contains_key("frames"),
            "no batch under way: {fields:?}"
        );
        let frames: Vec<Vec<u8>> =
            fred::interfaces::ListInterface::lrange(&app.inspect, key.as_str(), 0, -1)
                .await
                .unwrap();
        let (entries, unreadable) = experiment_unadded(&frames, None, |_| true);
        assert_eq!(unreadable, 0);
        for entry in entries {
            for (at, n) in entry.counts.counts.iter().enumerate() {
                outcomes[at] += n;
            }
        }
    }
    for hash in hashes(&app, &days).await {
        for (at, field) in EXPERIMENT_FIELDS.iter().enumerate() {
            outcomes[at] += hash.get(*field).map_or(0, |n| {
                std::str::from_utf8(n).unwrap().parse::<u64>().unwrap()
            });
        }
    }
    assert_eq!(merchants.len(), MERCHANTS, "every merchant in the log");
    assert_eq!(
        (calls, failed),
        (MERCHANTS as u64, failures.load(Ordering::Relaxed))
    );
    // The windows the service folded from the log: one call each, the
    // failed ones failed (a sample of the default tenant's merchants).
    for i in (0..MERCHANTS).step_by(TENANTS.len() * 97) {
        let rows = health(&app, &format!("pm{i}")).await.unwrap();
        assert_eq!(rows.len(), 1, "pm{i}: {rows:?}");
        let failed = u64::from(i % 5 == 0);
        assert_eq!((rows[0].calls, rows[0].failures), (1, failed), "pm{i}");
    }
    let expected_failed = failures.load(Ordering::Relaxed);
    assert_eq!(
        outcomes[0],
        MERCHANTS as u64 - expected_failed,
        "treated, followed, success"
    );
    assert_eq!(outcomes[1], expected_failed, "treated, followed, failure");
    assert_eq!(outcomes[2..].iter().sum::<u64>(), 0);

    // The background cost: a bounded number of calls per tick, whatever
    // the merchants (16 shards; flush and experiment each one per shard).
    let metrics = app.scrape().await;
    let background = |command: &str| {
        samples(
            &metrics,
            "sticky_routing_redis_command_duration_seconds_count",
        )
        .iter()
        .filter(|(labels, _)| labels.contains(&format!("command=\"{command}\"")))
        .map(|(_, n)| *n)
        .sum::<f64>()
    };
    let (flushes, experiments) = (background("breaker_flush"), background("experiment_flush"));
    let compactions = background("experiment_compact");
    // Per 500 ms tick, at most 4 calls per shard of the breaker's flush, 1
    // push and 2 compaction calls per shard of the experiment's, however
    // many merchants (a call per merchant, before: 20,000 of each).
    let ticks = (started.elapsed().as_secs_f64() / 0.5).ceil() + 1.0;
    assert!(
        flushes <= 4.0 * 16.0 * ticks
            && experiments <= 16.0 * ticks
            && compactions <= 2.0 * 16.0 * ticks,
        "{flushes} {experiments} {compactions} over {ticks} ticks"
    );
    app.assert_every_key_has_a_ttl().await;
}

/// Every hash of `keys`, read 16 at a time.
async fn hashes(app: &TestApp, keys: &[String]) -> Vec<std::collections::HashMap<String, Vec<u8>>> {
    let mut reads = tokio::task::JoinSet::new();
    for chunk in keys.chunks(keys.len().div_ceil(16).max(1)) {
        let (client, chunk) = (app.inspect.clone(), chunk.to_vec());
        reads.spawn(async move {
            let mut read = Vec::with_capacity(chunk.len());
            for key in chunk {
                let hash: std::collections::HashMap<String, Vec<u8>> =
                    fred::interfaces::HashesInterface::hgetall(&client, key.as_str())
                        .await
                        .unwrap();
                read.push(hash);
            }
            read
        });
    }
    let mut all = Vec::new();
    while let Some(read) = reads.join_next().await {
        all.extend(read.unwrap());
    }
    all
}
