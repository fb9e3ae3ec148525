//! The connector circuit breaker through the API: trips from RecordOutcome
//! across instances, vetoes in GetPin with its reason, half-open probes,
//! overrides, the admin RPCs, TTLs on every key, and failing open.

use std::time::{Duration, Instant};

use rstest::rstest;
use sticky_routing::config::Settings;
use sticky_routing::domain::breaker::{BreakerSettings, Share};
use sticky_routing::transport::pb;
use tonic::Code;

use crate::support::*;

const OPEN: i32 = pb::BreakerState::Open as i32;
const HALF_OPEN: i32 = pb::BreakerState::HalfOpen as i32;
const CLOSED: i32 = pb::BreakerState::Closed as i32;

/// A breaker that trips on 4 calls, opens for `open_for`, probes 2 calls.
fn small(open_for: Duration, probe_share: f64) -> impl FnOnce(&mut Settings) {
    move |settings| {
        settings.breaker = Some(BreakerSettings {
            window: Duration::from_secs(20),
            min_calls: 4,
            open_for,
            probe_calls: 2,
            probe_share: Share::new(probe_share).unwrap(),
            ..BreakerSettings::DEFAULT
        });
    }
}

/// `times` outcomes of `connector` for merchant m1, each for a new customer
/// (so failures find no habit: they still count).
async fn outcomes(app: &TestApp, connector: &str, outcome: pb::Outcome, times: usize) {
    outcomes_of(app, "m1", connector, outcome, times).await;
}

async fn outcomes_of(
    app: &TestApp,
    merchant: &str,
    connector: &str,
    outcome: pb::Outcome,
    times: usize,
) {
    for i in 0..times {
        let customer = format!("x{}{i}", rand_suffix());
        app.record(super::support::outcome(
            merchant, &customer, connector, outcome,
        ))
        .await
        .unwrap();
    }
}

/// A fresh suffix so customers of one test never repeat.
fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// `hab` pays with GIGADAT (3) and LOONIO (2).
async fn habits(app: &TestApp) {
    for (connector, times) in [("GIGADAT", 3), ("LOONIO", 2)] {
        for _ in 0..times {
            app.success("hab", connector).await;
        }
    }
}

async fn health(app: &TestApp, merchant: &str) -> Result<Vec<pb::ConnectorHealth>, tonic::Status> {
    app.api
        .clone()
        .get_connector_health(pb::GetConnectorHealthRequest {
            merchant_id: merchant.into(),
        })
        .await
        .map(|r| r.into_inner().connectors)
}

async fn connector_health(app: &TestApp, connector: &str) -> Option<pb::ConnectorHealth> {
    health(app, "m1")
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.connector == connector)
}

async fn set_override(
    app: &TestApp,
    connector: &str,
    over: i32,
    ttl_seconds: u32,
) -> Result<(), tonic::Status> {
    app.api
        .clone()
        .set_connector_override(pb::SetConnectorOverrideRequest {
            merchant_id: "m1".into(),
            connector: connector.into(),
            r#override: over,
            ttl_seconds,
        })
        .await
        .map(|_| ())
}

fn vetoes(pin: &pb::GetPinResponse) -> Vec<(&str, i32)> {
    pin.vetoes
        .iter()
        .map(|v| (v.connector.as_str(), v.reason))
        .collect()
}

async fn state_is(app: &TestApp, connector: &str, state: i32) -> bool {
    connector_health(app, connector)
        .await
        .is_some_and(|h| h.state == state)
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn half_the_calls_failing_trips_and_every_pin_yields_within_two_seconds(
    #[case] topology: Topology,
) {
    let app = spawn_app_on(topology, |settings| {
        settings.breaker = Some(BreakerSettings::DEFAULT);
    })
    .await;
    habits(&app).await;
    // GIGADAT: 3 successes so far; 7 more and 9 failures make 19 calls.
    outcomes(&app, "GIGADAT", pb::Outcome::Success, 7).await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 9).await;
    eventually(Duration::from_secs(3), "19 calls counted", || async {
        connector_health(&app, "GIGADAT")
            .await
            .is_some_and(|h| (h.calls, h.failures) == (19, 9))
    })
    .await;
    let h = connector_health(&app, "GIGADAT").await.unwrap();
    assert_eq!(h.state, CLOSED, "9 of 19 is below the ratio: {h:?}");
    let pin = app.pin(pin_request("hab", &[])).await.unwrap();
    assert_eq!(pin.connector, "GIGADAT");
    assert!(pin.vetoes.is_empty());

    // The 20th call, a failure: 10 of 20 trips (inclusive).
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 1).await;
    let answered = Instant::now();
    eventually(Duration::from_secs(2), "the pin yields", || async {
        app.pin(pin_request("hab", &[])).await.unwrap().connector == "LOONIO"
    })
    .await;
    assert!(answered.elapsed() < Duration::from_secs(2));
    let pin = app.pin(pin_request("hab", &[])).await.unwrap();
    assert!(pin.pinned);
    assert_eq!((pin.connector.as_str(), pin.net_count), ("LOONIO", 2));
    assert_eq!(ranked(&pin), [("GIGADAT", 3), ("LOONIO", 2)]);
    assert_eq!(pin.vetoed.len(), 1);
    assert_eq!(pin.vetoed[0].connector, "GIGADAT");
    assert_eq!(
        vetoes(&pin),
        [("GIGADAT", pb::VetoReason::CircuitOpen as i32)]
    );
    assert_eq!(pin.vetoes[0].net_count, 3);

    // GetConnectorHealth, from Redis: the counts that tripped it, and when it ends.
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let connectors = health(&app, "m1").await.unwrap();
    let names: Vec<&str> = connectors.iter().map(|c| c.connector.as_str()).collect();
    assert_eq!(names, ["GIGADAT", "LOONIO"], "bytewise order");
    let h = &connectors[0];
    assert_eq!((h.state, h.calls, h.failures), (OPEN, 20, 10));
    assert!(
        (now_ms + 27_000..=now_ms + 30_500).contains(&h.open_until_unix_ms),
        "open until {} at {now_ms}",
        h.open_until_unix_ms
    );
    assert_eq!(h.r#override, pb::BreakerOverride::None as i32);
    assert_eq!((connectors[1].state, connectors[1].calls), (CLOSED, 2));
    assert!(health(&app, "m2").await.unwrap().is_empty());

    // Every key has a TTL, the breaker's within their bounds.
    app.assert_every_key_has_a_ttl().await;
    for key in app.keys().await {
        if key.starts_with("sticky_brk_") {
            let pttl: i64 = fred::prelude::KeysInterface::pttl(&app.inspect, &key)
                .await
                .unwrap();
            assert!(pttl <= 120_000, "{key}: {pttl} ms");
        }
    }
    let metrics = app.scrape().await;
    assert_eq!(
        sample(
            &metrics,
            "sticky_routing_breaker_transitions_total{from=\"closed\",to=\"open\"}"
        ),
        Some(1.0)
    );
    assert!(
        sample(
            &metrics,
            "sticky_routing_breaker_vetoes_total{reason=\"circuit_open\"}"
        )
        .unwrap()
            >= 1.0
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn half_open_probes_close_it_or_open_it_again(#[case] topology: Topology) {
    // Every GetPin probes a HALF-OPEN candidate.
    let app = spawn_app_on(topology, small(Duration::from_secs(1), 1.0)).await;
    habits(&app).await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 4).await;
    eventually(Duration::from_secs(2), "open", || {
        state_is(&app, "GIGADAT", OPEN)
    })
    .await;
    // hab's 3 successes and the failures: it tripped at 50 % or more.
    let tripped = connector_health(&app, "GIGADAT").await.unwrap();
    assert!(
        tripped.calls >= 4 && tripped.failures * 2 >= tripped.calls,
        "{tripped:?}"
    );
    // Calls answered while OPEN count nowhere.
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 3).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let open = connector_health(&app, "GIGADAT").await.unwrap();
    assert_eq!(
        (open.state, open.calls, open.failures),
        (OPEN, tripped.calls, tripped.failures)
    );

    eventually(Duration::from_secs(3), "half-open", || {
        state_is(&app, "GIGADAT", HALF_OPEN)
    })
    .await;
    let pin = app.pin(pin_request("hab", &[])).await.unwrap();
    assert_eq!(pin.connector, "GIGADAT", "probe share 100 %: {pin:?}");
    // Two successful probes: 0 of 2 fail, so it closes, with counts afresh.
    outcomes(&app, "GIGADAT", pb::Outcome::Success, 2).await;
    eventually(Duration::from_secs(2), "closed", || async {
        connector_health(&app, "GIGADAT")
            .await
            .is_none_or(|h| h.state == CLOSED)
    })
    .await;
    if let Some(h) = connector_health(&app, "GIGADAT").await {
        assert_eq!((h.calls, h.failures), (0, 0), "probes do not carry over");
    }

    // Trip again; this time the probes fail, and it opens again.
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 4).await;
    eventually(Duration::from_secs(2), "open again", || {
        state_is(&app, "GIGADAT", OPEN)
    })
    .await;
    let first_until = connector_health(&app, "GIGADAT")
        .await
        .unwrap()
        .open_until_unix_ms;
    eventually(Duration::from_secs(3), "half-open again", || {
        state_is(&app, "GIGADAT", HALF_OPEN)
    })
    .await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 1).await;
    outcomes(&app, "GIGADAT", pb::Outcome::Success, 1).await;
    eventually(Duration::from_secs(2), "reopened", || async {
        connector_health(&app, "GIGADAT")
            .await
            .is_some_and(|h| h.state == OPEN && h.open_until_unix_ms > first_until)
    })
    .await;
    let h = connector_health(&app, "GIGADAT").await.unwrap();
    assert_eq!((h.calls, h.failures), (2, 1), "the probes that reopened it");
    let metrics = app.scrape().await;
    for (from, to) in [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
        ("half_open", "open"),
    ] {
        let series =
            format!("sticky_routing_breaker_transitions_total{{from=\"{from}\",to=\"{to}\"}}");
        assert!(
            sample(&metrics, &series).is_some_and(|n| n >= 1.0),
            "{series} in\n{metrics}"
        );
    }
    app.assert_every_key_has_a_ttl().await;
}

#[tokio::test]
async fn a_half_open_breaker_vetoes_all_but_the_probe_share() {
    let app = spawn_app_with(small(Duration::from_secs(1), 0.01)).await;
    habits(&app).await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 4).await;
    eventually(Duration::from_secs(4), "half-open", || {
        state_is(&app, "GIGADAT", HALF_OPEN)
    })
    .await;
    let mut vetoed = 0;
    for _ in 0..50 {
        let pin = app.pin(pin_request("hab", &[])).await.unwrap();
        if vetoes(&pin) == [("GIGADAT", pb::VetoReason::CircuitHalfOpen as i32)] {
            assert_eq!(pin.connector, "LOONIO");
            vetoed += 1;
        }
    }
    assert!(
        vetoed >= 45,
        "a 1 % probe share vetoes nearly all: {vetoed} of 50"
    );
}

#[tokio::test]
async fn calls_older_than_the_window_no_longer_count() {
    let app = spawn_app_with(|settings| {
        settings.breaker = Some(BreakerSettings {
            window: Duration::from_secs(2),
            min_calls: 4,
            ..BreakerSettings::DEFAULT
        });
    })
    .await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 3).await;
    // A call counts for at least WINDOW, never after WINDOW plus a bucket (0.2 s).
    tokio::time::sleep(Duration::from_millis(2_400)).await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 1).await;
    eventually(Duration::from_secs(2), "one call in the window", || async {
        connector_health(&app, "GIGADAT")
            .await
            .is_some_and(|h| (h.state, h.calls) == (CLOSED, 1))
    })
    .await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 3).await;
    eventually(Duration::from_secs(2), "four in the window trip it", || {
        state_is(&app, "GIGADAT", OPEN)
    })
    .await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn overrides_win_over_the_breaker_and_expire(#[case] topology: Topology) {
    let app = spawn_app_on(topology, small(Duration::from_secs(60), 0.1)).await;
    habits(&app).await;
    set_override(&app, "GIGADAT", pb::BreakerOverride::ForceOpen as i32, 2)
        .await
        .unwrap();
    // This instance sees its own override at once.
    let pin = app.pin(pin_request("hab", &[])).await.unwrap();
    assert_eq!(
        vetoes(&pin),
        [("GIGADAT", pb::VetoReason::ForcedOpen as i32)]
    );
    assert_eq!(pin.connector, "LOONIO");
    let h = connector_health(&app, "GIGADAT").await.unwrap();
    assert_eq!(h.r#override, pb::BreakerOverride::ForceOpen as i32);
    assert!(h.override_until_unix_ms > 0);
    // It expires after its TTL.
    eventually(Duration::from_secs(4), "the override expires", || async {
        app.pin(pin_request("hab", &[]))
            .await
            .unwrap()
            .vetoes
            .is_empty()
    })
    .await;

    // FORCE_CLOSED: an OPEN breaker is ignored; NONE clears it.
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 4).await;
    eventually(Duration::from_secs(2), "open", || {
        state_is(&app, "GIGADAT", OPEN)
    })
    .await;
    set_override(
        &app,
        "GIGADAT",
        pb::BreakerOverride::ForceClosed as i32,
        600,
    )
    .await
    .unwrap();
    let pin = app.pin(pin_request("hab", &[])).await.unwrap();
    assert_eq!(pin.connector, "GIGADAT");
    assert!(pin.vetoes.is_empty());
    set_override(&app, "GIGADAT", pb::BreakerOverride::None as i32, 0)
        .await
        .unwrap();
    let pin = app.pin(pin_request("hab", &[])).await.unwrap();
    assert_eq!(
        vetoes(&pin),
        [("GIGADAT", pb::VetoReason::CircuitOpen as i32)]
    );
    // FORCE_OPEN on an OPEN breaker: the override's reason.
    set_override(&app, "GIGADAT", pb::BreakerOverride::ForceOpen as i32, 600)
        .await
        .unwrap();
    let pin = app.pin(pin_request("hab", &[])).await.unwrap();
    assert_eq!(
        vetoes(&pin),
        [("GIGADAT", pb::VetoReason::ForcedOpen as i32)]
    );
    app.assert_every_key_has_a_ttl().await;
}

#[tokio::test]
async fn bad_override_requests_name_their_field_and_write_nothing() {
    let app = spawn_app_with(small(Duration::from_secs(60), 0.1)).await;
    let force_open = pb::BreakerOverride::ForceOpen as i32;
    let cases = [
        ("m1", "GIGADAT", force_open, 0, "ttl_seconds"),
        ("m1", "GIGADAT", force_open, 604_801, "ttl_seconds"),
        ("m1", "GIGADAT", 9, 10, "override"),
        ("", "GIGADAT", force_open, 10, "merchant_id"),
        ("m1", "", force_open, 10, "connector"),
    ];
    for (merchant, connector, over, ttl, field) in cases {
        let status = app
            .api
            .clone()
            .set_connector_override(pb::SetConnectorOverrideRequest {
                merchant_id: merchant.into(),
                connector: connector.into(),
                r#override: over,
                ttl_seconds: ttl,
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(status.message().contains(field), "{field}: {status:?}");
    }
    let status = health(&app, " ").await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("merchant_id"));
    assert!(app.keys().await.is_empty(), "nothing written");
    set_override(&app, "GIGADAT", force_open, 604_800)
        .await
        .unwrap();
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn two_processes_share_the_counts_and_see_each_others_transitions(
    #[case] topology: Topology,
) {
    let app = spawn_app_on(topology, small(Duration::from_secs(30), 0.1)).await;
    habits(&app).await;
    let (mut peer, channel) = start_binary_listening(
        app.redis.url(),
        &[
            ("STICKY_ROUTING_BREAKER_MIN_CALLS", "4".into()),
            ("STICKY_ROUTING_BREAKER_WINDOW", "20s".into()),
        ],
        std::process::Stdio::null(),
    )
    .await;
    let peer_api = pb::sticky_routing_client::StickyRoutingClient::new(channel);
    // Two failures here and two there: counted together, they trip it.
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 2).await;
    for i in 0..2 {
        peer_api
            .clone()
            .record_outcome(outcome(
                "m1",
                &format!("peer{i}"),
                "GIGADAT",
                pb::Outcome::GatewayFailure,
            ))
            .await
            .unwrap();
    }
    let answered = Instant::now();
    let pin_on_peer = || {
        let mut api = peer_api.clone();
        async move {
            api.get_pin(pin_request("hab", &[]))
                .await
                .unwrap()
                .into_inner()
        }
    };
    eventually(Duration::from_secs(2), "the peer sees the trip", || async {
        pin_on_peer().await.connector == "LOONIO"
    })
    .await;
    eventually(Duration::from_secs(2), "this instance sees it", || async {
        app.pin(pin_request("hab", &[])).await.unwrap().connector == "LOONIO"
    })
    .await;
    assert!(answered.elapsed() < Duration::from_secs(2));
    // An override set here is seen there within 2 s.
    set_override(&app, "LOONIO", pb::BreakerOverride::ForceOpen as i32, 60)
        .await
        .unwrap();
    let set = Instant::now();
    eventually(
        Duration::from_secs(2),
        "the peer sees the override",
        || async { !pin_on_peer().await.pinned },
    )
    .await;
    assert!(set.elapsed() < Duration::from_secs(2));
    let _ = peer.kill().await;
}

#[tokio::test]
async fn duplicates_are_not_counted() {
    let app = spawn_app_with(|settings| {
        settings.breaker = Some(BreakerSettings {
            min_calls: 2,
            failure_ratio: Share::new(0.6).unwrap(),
            ..BreakerSettings::DEFAULT
        });
    })
    .await;
    // Two successes, so the failure leaves a habit that remembers the attempt.
    app.success("hab", "GIGADAT").await;
    app.success("hab", "GIGADAT").await;
    for _ in 0..4 {
        app.record(pb::RecordOutcomeRequest {
            attempt_id: "a1".into(),
            ..outcome("m1", "hab", "GIGADAT", pb::Outcome::GatewayFailure)
        })
        .await
        .unwrap();
    }
    // Counted: 2 successes, 1 failure (not the 3 duplicates): 1/3 < 0.6;
    // with them, 4 of 6 would trip it.
    eventually(Duration::from_secs(3), "counted", || async {
        connector_health(&app, "GIGADAT")
            .await
            .is_some_and(|h| (h.calls, h.failures) == (3, 1))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let h = connector_health(&app, "GIGADAT").await.unwrap();
    assert_eq!((h.state, h.calls, h.failures), (CLOSED, 3, 1));
}

#[tokio::test]
async fn off_is_v1_1_and_keeps_nothing() {
    let app = spawn_app_with(|settings| settings.breaker = None).await;
    habits(&app).await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 30).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let pin = app.pin(pin_request("hab", &[])).await.unwrap();
    assert_eq!((pin.connector.as_str(), pin.net_count), ("GIGADAT", 3));
    assert!(pin.vetoed.is_empty() && pin.vetoes.is_empty());
    for status in [
        health(&app, "m1").await.unwrap_err(),
        set_override(&app, "GIGADAT", pb::BreakerOverride::ForceOpen as i32, 10)
            .await
            .unwrap_err(),
    ] {
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert!(
            status.message().contains("STICKY_ROUTING_BREAKER"),
            "{status:?}"
        );
    }
    assert!(
        app.keys()
            .await
            .iter()
            .all(|k| !k.starts_with("sticky_brk_")),
        "no breaker key"
    );
}

#[tokio::test]
async fn a_restarted_redis_is_picked_up_again() {
    let mut app = spawn_app_with(small(Duration::from_secs(30), 0.1)).await;
    habits(&app).await;
    app.redis.restart();
    app.wait_until_ready(true).await;
    // Whether Redis kept its data or not, 10 failures trip it (at most 6
    // successes of hab in the window).
    habits(&app).await;
    outcomes(&app, "GIGADAT", pb::Outcome::GatewayFailure, 10).await;
    eventually(
        Duration::from_secs(4),
        "trips after the reconnect",
        || async { app.pin(pin_request("hab", &[])).await.unwrap().connector == "LOONIO" },
    )
    .await;
}

#[tokio::test]
async fn with_the_breakers_shard_down_pins_go_on_and_fail_open_after_open_for() {
    use fred::util::redis_keyslot;
    use sticky_routing::domain::ids::MerchantId;
    use sticky_routing::domain::keys::breaker_index_key;
    use sticky_routing::domain::shards::shard_of;
    use sticky_routing::domain::tenant::Tenant;
    use test_support::redis_cluster::owned_slots;

    let open_for = Duration::from_secs(3);
    let mut app = spawn_app_on(Topology::Cluster, small(open_for, 0.01)).await;
    let owner = |slot: u16, primaries: &[u16]| {
        *primaries
            .iter()
            .find(|port| owned_slots(**port).iter().any(|r| r.contains(&slot)))
            .unwrap()
    };
    let primaries = app.redis.cluster().primaries();
    // The breaker's keys: its counts, OPEN keys and its shard's index, all
    // in the slot of the merchant's shard's hash tag.
    let merchant = "m0".to_owned();
    let shard = shard_of(&Tenant::DEFAULT, &MerchantId::parse(&merchant).unwrap());
    let down = owner(
        redis_keyslot(breaker_index_key(shard).as_bytes()),
        &primaries,
    );
    let customer = (0..)
        .map(|i| format!("cust{i}"))
        .find(|c| {
            let slot = redis_keyslot(format!("sticky_gw_{merchant}_{c}").as_bytes());
            owner(slot, &primaries) != down
        })
        .unwrap();
    let pin_request = |customer: &str, eligible: &[&str]| pb::GetPinRequest {
        merchant_id: merchant.clone(),
        ..pin_request(customer, eligible)
    };
    for (connector, times) in [("GIGADAT", 3), ("LOONIO", 2)] {
        for _ in 0..times {
            app.record(outcome(
                &merchant,
                &customer,
                connector,
                pb::Outcome::Success,
            ))
            .await
            .unwrap();
        }
    }
    outcomes_of(&app, &merchant, "GIGADAT", pb::Outcome::GatewayFailure, 4).await;
    eventually(Duration::from_secs(2), "open", || async {
        app.pin(pin_request(&customer, &[]))
            .await
            .unwrap()
            .vetoes
            .len()
            == 1
    })
    .await;

    // The breaker's shard (primary and replica, so nothing fails over) freezes.
    let frozen = [down, app.redis.cluster().replica_of(down)];
    // Otherwise the whole cluster refuses every call once the frozen shard
    // is marked failed: Redis Cluster's own rule, not the breaker's.
    let running: Vec<u16> = app.redis.cluster().running().collect();
    for port in running {
        redis_cli(
            port,
            &["config", "set", "cluster-require-full-coverage", "no"],
        );
    }
    for port in &frozen {
        app.redis.cluster().node(*port).signal("-STOP");
    }
    let since = Instant::now();
    // No call fails because of the breaker; after OPEN_FOR without a read,
    // CLOSED is assumed (a HALF-OPEN breaker would veto 99 % of these).
    let waited = eventually(open_for + Duration::from_secs(3), "fail-open", || async {
        let mut unvetoed = 0;
        for _ in 0..20 {
            let answer = app.pin(pin_request(&customer, &[])).await.unwrap();
            unvetoed += usize::from(answer.vetoes.is_empty() && answer.connector == "GIGADAT");
        }
        unvetoed == 20
    })
    .await;
    // OPEN_FOR counts from the last successful read, which came up to a
    // poll (500 ms) before the freeze, later still when the machine is
    // loaded (a CI run once saw 2.39 s): a second short of OPEN_FOR still
    // shows the last known state held, not an at-once fail-open.
    assert!(
        since.elapsed() >= open_for - Duration::from_secs(1),
        "{waited:?}"
    );
    app.record(outcome(
        &merchant,
        &customer,
        "GIGADAT",
        pb::Outcome::GatewayFailure,
    ))
    .await
    .unwrap();
    let metrics = app.scrape().await;
    assert!(
        samples(&metrics, "sticky_routing_breaker_io_failures_total")
            .iter()
            .any(|(labels, n)| labels.contains("\"flush\"") && *n >= 1.0),
        "{metrics}"
    );
    for port in &frozen {
        app.redis.cluster().node(*port).signal("-CONT");
    }
}

mod edges;
mod platform;
