//! The experiment counts log through the API, on two instances sharing
//! one Redis, single node and Cluster: outcomes recorded on either are
//! counted once by GetUplift on either, before, while and after the log
//! is added into the daily hashes (enough merchants for several chunks a
//! shard; the batch age, 8 s here, lets the recording end first, so the
//! reads meet the batches half added), and once it is added the log is
//! empty and the hashes hold every outcome.

use std::time::{Duration, Instant};

use rstest::rstest;
use sticky_routing::domain::keys::{EXPERIMENT_FIELDS, parse_experiment_key};
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tonic::transport::Channel;

use crate::support::*;

const MERCHANTS: usize = 12_000;

/// Merchant `i`'s treated outcomes: a success, and for every tenth a
/// failure too (recorded on the other instance).
fn expected(i: usize) -> u64 {
    1 + u64::from(i.is_multiple_of(10))
}

async fn treated(api: &StickyRoutingClient<Channel>, i: usize) -> u64 {
    let answer = api
        .clone()
        .get_uplift(pb::GetUpliftRequest {
            merchant_id: format!("em{i}"),
            days: 1,
        })
        .await
        .unwrap()
        .into_inner();
    answer.treated.unwrap().outcomes
}

/// One outcome of each merchant `of` keeps, on `api`.
async fn record_all(api: StickyRoutingClient<Channel>, of: impl Fn(usize) -> bool, success: bool) {
    let mut lanes = tokio::task::JoinSet::new();
    for lane in 0..64 {
        let api = api.clone();
        let mine: Vec<usize> = (lane..MERCHANTS).step_by(64).filter(|i| of(*i)).collect();
        lanes.spawn(async move {
            for i in mine {
                let mut request = outcome(
                    &format!("em{i}"),
                    "c1",
                    "A",
                    if success {
                        pb::Outcome::Success
                    } else {
                        pb::Outcome::GatewayFailure
                    },
                );
                request.pin_connector = "A".into();
                api.clone().record_outcome(request).await.unwrap();
            }
        });
    }
    while let Some(done) = lanes.join_next().await {
        done.unwrap();
    }
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_count_each_outcome_once_while_the_log_is_added(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |settings| {
        settings.experiment_batch_age = Duration::from_secs(8);
    })
    .await;
    let peer = app.peer().await;
    // A success of every merchant on the app, a failure of every tenth on
    // the peer, at once.
    tokio::join!(
        record_all(app.api.clone(), |_| true, true),
        record_all(peer.api.clone(), |i| i.is_multiple_of(10), false),
    );
    let sample: Vec<usize> = (0..MERCHANTS).step_by(97).collect();
    // Visible within 2 s of the answers...
    eventually(Duration::from_secs(2), "every outcome visible", || async {
        for &i in &sample {
            if treated(&app.api, i).await != expected(i) {
                return false;
            }
        }
        true
    })
    .await;
    // ...then every read, on either instance, counts each outcome once
    // while the batches are added, until the log is empty.
    let started = Instant::now();
    let mut rounds = 0;
    loop {
        let logs_left = app
            .keys()
            .await
            .iter()
            .filter(|k| k.starts_with("sticky_exp_l{"))
            .count();
        for &i in &sample {
            for api in [&app.api, &peer.api] {
                assert_eq!(treated(api, i).await, expected(i), "em{i}, round {rounds}");
            }
        }
        rounds += 1;
        if logs_left == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{logs_left} logs still hold counts"
        );
    }
    assert!(rounds > 1, "the log was added before a read in between");
    // The daily hashes hold every outcome.
    let mut treated_in_hashes = 0;
    for key in app.keys().await {
        if parse_experiment_key(&key).is_none() {
            continue;
        }
        let hash: std::collections::HashMap<String, u64> =
            fred::interfaces::HashesInterface::hgetall(&app.inspect, key.as_str())
                .await
                .unwrap();
        treated_in_hashes += EXPERIMENT_FIELDS[..4]
            .iter()
            .map(|f| hash.get(*f).copied().unwrap_or(0))
            .sum::<u64>();
    }
    let all: u64 = (0..MERCHANTS).map(expected).sum();
    assert_eq!(treated_in_hashes, all);
    app.assert_every_key_has_a_ttl().await;
    peer.stop().await;
}
