//! Atomicity under concurrency: parallel successes and failures on one combo
//! lose no update, never go below zero, and leave no key without a TTL.

use std::collections::BTreeSet;
use std::time::Duration;

use fred::prelude::{HashesInterface, KeysInterface};
use sticky_routing::transport::pb;

use rstest::rstest;

use crate::support::*;

/// The combo every test here hammers: customer c1 of m1, INTERAC/RTP/GIGADAT.
const KEY: &str = "sticky_gw_m1_c1";
const FIELD: &str = "INTERAC:RTP:GIGADAT";

/// An app whose Redis calls may wait out a loaded test machine.
async fn app(topology: Topology) -> TestApp {
    spawn_app_on(topology, |s| {
        s.redis.command_timeout = Duration::from_secs(5)
    })
    .await
}

/// Sets the combo's count directly in Redis, with a TTL, as the service would.
async fn arrange(app: &TestApp, count: i64) {
    app.inspect
        .hset::<(), _, _>(KEY, (FIELD, count))
        .await
        .unwrap();
    app.inspect.expire::<(), _>(KEY, 3600, None).await.unwrap();
}

/// The raw count in the hash; `None` when the field is absent.
async fn stored(app: &TestApp) -> Option<i64> {
    app.inspect.hget(KEY, FIELD).await.unwrap()
}

/// The count as the API reads it.
async fn pinned(app: &TestApp) -> i64 {
    app.pin(pin_request("c1", &[])).await.unwrap().net_count
}

/// Sends `successes` successes and `failures` failures for the combo all at
/// once, interleaved, each on its own task; answers in sending order.
async fn in_parallel(
    app: &TestApp,
    successes: usize,
    failures: usize,
) -> Vec<pb::RecordOutcomeResponse> {
    let outcomes = (0..successes.max(failures)).flat_map(|i| {
        let s = (i < successes).then_some(pb::Outcome::Success);
        let f = (i < failures).then_some(pb::Outcome::GatewayFailure);
        s.into_iter().chain(f)
    });
    let calls: Vec<_> = outcomes
        .map(|o| {
            let mut api = app.api.clone();
            tokio::spawn(async move { api.record_outcome(outcome("m1", "c1", "GIGADAT", o)).await })
        })
        .collect();
    let mut responses = Vec::with_capacity(calls.len());
    for call in calls {
        responses.push(
            call.await
                .unwrap()
                .expect("every call succeeds")
                .into_inner(),
        );
    }
    responses
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_successes_lose_no_update(#[case] topology: Topology) {
    let app = app(topology).await;
    assert_eq!(app.success("c1", "GIGADAT").await.net_count, 1);

    let responses = in_parallel(&app, 200, 0).await;
    assert!(
        responses.iter().all(|r| r.result == APPLIED),
        "every success applies"
    );
    let seen: BTreeSet<i64> = responses.iter().map(|r| r.net_count).collect();
    assert_eq!(
        seen,
        (2..=201).collect(),
        "each success sees its own increment"
    );
    assert_eq!((stored(&app).await, pinned(&app).await), (Some(201), 201));
    app.assert_every_key_has_a_ttl().await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_failures_floor_at_zero_and_delete_the_combo(#[case] topology: Topology) {
    let app = app(topology).await;
    arrange(&app, 20).await;

    let responses = in_parallel(&app, 0, 60).await;
    assert!(
        responses.iter().all(|r| r.net_count >= 0),
        "no negative count is ever reported"
    );
    let applied: BTreeSet<i64> = responses
        .iter()
        .filter(|r| r.result == APPLIED)
        .map(|r| r.net_count)
        .collect();
    assert_eq!(
        applied,
        (0..20).collect(),
        "exactly 20 failures apply, one per unit"
    );
    let ignored = responses
        .iter()
        .filter(|r| (r.result, r.net_count) == (IGNORED_NO_HABIT, 0))
        .count();
    assert_eq!(ignored, 40, "the rest find no habit");

    assert_eq!(stored(&app).await, None, "the combo is deleted at zero");
    assert_eq!(
        app.inspect.exists::<i64, _>(KEY).await.unwrap(),
        0,
        "its only combo gone, the hash is gone"
    );
    assert!(!app.pin(pin_request("c1", &[])).await.unwrap().pinned);
    app.assert_every_key_has_a_ttl().await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_mixed_outcomes_cancel_out_exactly(#[case] topology: Topology) {
    let app = app(topology).await;
    arrange(&app, 300).await;

    let responses = in_parallel(&app, 100, 100).await;
    assert!(
        responses
            .iter()
            .all(|r| r.result == APPLIED && (200..=400).contains(&r.net_count)),
        "every call applies within reach of 300"
    );
    assert_eq!((stored(&app).await, pinned(&app).await), (Some(300), 300));
    app.assert_every_key_has_a_ttl().await;
}
