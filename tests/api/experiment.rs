//! The rollout's experiment (contract v1.2 §4) through the API and the
//! binary: outcomes recorded with `pin_connector` are counted in the group
//! GetPin's answer put the customer in (treated or holdout in mode `on`,
//! shadow in mode `shadow`, nothing in mode `off`, no duplicate), GetUplift
//! answers exactly those counts with their difference and Newcombe
//! interval within 2 s, and `sticky-routing report`, run as the export's
//! read-only user, prints the same as JSON Lines, on a single node and on
//! Cluster. Every experiment key has a TTL.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rstest::rstest;
use sticky_routing::domain::rollout::{HoldoutShare, Mode};
use sticky_routing::transport::pb;
use test_support::redis_server::{EXPORT_PASSWORD, EXPORT_USER};
use tonic::Code;

use crate::support::*;

/// What a group of the experiment should hold, counted by the test.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Expected {
    outcomes: u64,
    successes: u64,
    followed: u64,
    overridden: u64,
}

impl Expected {
    fn add(&mut self, success: bool, followed: Option<bool>) {
        self.outcomes += 1;
        self.successes += u64::from(success);
        match followed {
            Some(true) => self.followed += 1,
            Some(false) => self.overridden += 1,
            None => {}
        }
    }

    fn rate(&self) -> f64 {
        if self.outcomes == 0 {
            0.0
        } else {
            self.successes as f64 / self.outcomes as f64
        }
    }

    fn matches(&self, stats: &pb::GroupStats) -> bool {
        (
            stats.outcomes,
            stats.successes,
            stats.followed,
            stats.overridden,
        ) == (
            self.outcomes,
            self.successes,
            self.followed,
            self.overridden,
        ) && (stats.success_rate - self.rate()).abs() < 1e-12
    }
}

/// The three groups of one merchant.
#[derive(Debug, Default, Clone, Copy)]
struct Groups {
    treated: Expected,
    holdout: Expected,
    shadow: Expected,
}

/// Wilson's score interval (z = 1.959964), written out here so the
/// service's Newcombe interval is checked against an independent copy.
fn wilson(s: u64, n: u64) -> (f64, f64) {
    let z = 1.959964_f64;
    let (s, n) = (s as f64, n as f64);
    let p = s / n;
    let centre = (2.0 * n * p + z * z) / (2.0 * (n + z * z));
    let half = z * (z * z + 4.0 * n * p * (1.0 - p)).sqrt() / (2.0 * (n + z * z));
    (centre - half, centre + half)
}

/// Newcombe's method 10 for p1 − p2.
fn newcombe(s1: u64, n1: u64, s2: u64, n2: u64) -> (f64, f64) {
    let (p1, p2) = (s1 as f64 / n1 as f64, s2 as f64 / n2 as f64);
    let ((l1, u1), (l2, u2)) = (wilson(s1, n1), wilson(s2, n2));
    let d = p1 - p2;
    (
        d - ((p1 - l1).powi(2) + (u2 - p2).powi(2)).sqrt(),
        d + ((u1 - p1).powi(2) + (p2 - l2).powi(2)).sqrt(),
    )
}

const ON: &str = "shop_on";
const SHADOW: &str = "shop{shadow}";
const OFF: &str = "shop*off";
const CUSTOMERS: usize = 120;

async fn uplift(
    app: &TestApp,
    merchant: &str,
    days: u32,
) -> Result<pb::GetUpliftResponse, tonic::Status> {
    app.api
        .clone()
        .get_uplift(pb::GetUpliftRequest {
            merchant_id: merchant.into(),
            days,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Records, per merchant, a habit on `A` for every customer (no
/// pin_connector: not counted), then asks GetPin and records one outcome
/// naming the connector GetPin named, following it or not, succeeding or
/// not; returns what each merchant's groups must hold, from GetPin's
/// reasons alone.
async fn populate(app: &TestApp) -> BTreeMap<&'static str, Groups> {
    let mut expected = BTreeMap::new();
    for merchant in [ON, SHADOW, OFF] {
        let mut groups = Groups::default();
        for i in 0..CUSTOMERS {
            let customer = format!("cus_{i}");
            app.record(outcome(merchant, &customer, "A", pb::Outcome::Success))
                .await
                .unwrap();
            let pin = app
                .pin(pb::GetPinRequest {
                    merchant_id: merchant.into(),
                    ..pin_request(&customer, &[])
                })
                .await
                .unwrap();
            let reason = pb::PinReason::try_from(pin.reason).unwrap();
            let named = match reason {
                pb::PinReason::Pinned => pin.connector.clone(),
                pb::PinReason::Holdout | pb::PinReason::Shadow => pin.would_pin.clone(),
                pb::PinReason::Disabled => "A".to_owned(),
                other => panic!("{merchant} {customer}: {other:?}"),
            };
            assert_eq!(named, "A", "{merchant} {customer}: {pin:?}");
            let follow = i % 4 != 3;
            let success = i % 3 != 0;
            let connector = if follow { "A" } else { "B" };
            let result = if success {
                pb::Outcome::Success
            } else {
                pb::Outcome::GatewayFailure
            };
            let mut request = outcome(merchant, &customer, connector, result);
            request.pin_connector = named;
            request.attempt_id = format!("pay_{i}");
            let first = app.record(request.clone()).await.unwrap();
            // A retry of an applied success is a duplicate: never counted.
            // (A call that left no hash to remember its attempt in, a
            // failure without a habit or one that took the count to 0, is
            // no duplicate when sent again, and would count again.)
            if success && first.result == pb::RecordResult::Applied as i32 {
                let again = app.record(request).await.unwrap();
                assert_eq!(again.result, pb::RecordResult::Duplicate as i32);
            }
            match reason {
                pb::PinReason::Pinned => groups.treated.add(success, Some(follow)),
                pb::PinReason::Holdout => groups.holdout.add(success, None),
                pb::PinReason::Shadow => groups.shadow.add(success, Some(follow)),
                _ => {}
            }
        }
        expected.insert(merchant, groups);
    }
    expected
}

fn check(merchant: &str, groups: &Groups, got: &pb::GetUpliftResponse) {
    let what = format!("{merchant}: {got:?} against {groups:?}");
    assert!(
        groups.treated.matches(got.treated.as_ref().unwrap()),
        "{what}"
    );
    assert!(
        groups.holdout.matches(got.holdout.as_ref().unwrap()),
        "{what}"
    );
    assert!(
        groups.shadow.matches(got.shadow.as_ref().unwrap()),
        "{what}"
    );
    let (t, h) = (groups.treated, groups.holdout);
    assert!(
        (got.difference - (t.rate() - h.rate())).abs() < 1e-12,
        "{what}"
    );
    assert_eq!(
        got.enough_data,
        t.outcomes >= 100 && h.outcomes >= 100,
        "{what}"
    );
    if t.outcomes > 0 && h.outcomes > 0 {
        let (lo, hi) = newcombe(t.successes, t.outcomes, h.successes, h.outcomes);
        assert!((got.ci_low - lo).abs() < 1e-9, "{what}: low {lo}");
        assert!((got.ci_high - hi).abs() < 1e-9, "{what}: high {hi}");
    }
}

/// `sticky-routing report args…` against `url`, as the export's user.
async fn report(url: String, args: &[&str]) -> std::process::Output {
    let vars = [
        ("STICKY_ROUTING_REDIS_URL", url),
        ("STICKY_ROUTING_REDIS_USERNAME", EXPORT_USER.to_owned()),
        ("STICKY_ROUTING_REDIS_PASSWORD", EXPORT_PASSWORD.to_owned()),
    ];
    let mut command = service_binary(&vars);
    command.arg("report").args(args);
    command.output().await.expect("the binary runs")
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn uplift_and_report_count_exactly_what_getpin_named(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |s| {
        let rollout = &mut s.rules.rollout;
        rollout
            .holdout_for
            .insert(ON.into(), HoldoutShare::parse("30%").unwrap());
        // A holdout outside mode on changes nothing.
        rollout
            .holdout_for
            .insert(SHADOW.into(), HoldoutShare::parse("50%").unwrap());
        rollout.mode_for.insert(SHADOW.into(), Mode::Shadow);
        rollout.mode_for.insert(OFF.into(), Mode::Off);
        rollout.salt = b"test salt".to_vec();
    })
    .await;
    let started = Instant::now();
    let expected = populate(&app).await;
    let on = expected[ON];
    assert!(
        on.treated.outcomes > 0 && on.holdout.outcomes > 0,
        "a 30 % holdout of {CUSTOMERS} customers: {on:?}"
    );

    // Every merchant's counts visible within 2 s of the last answer (a tick
    // and a flush). Each merchant is waited for: the last one's answers
    // came less than a tick before the end, so the counts of the merchant
    // before it may still be in memory too (seen in full runs of the suite
    // with shop{shadow}).
    let answered = Instant::now();
    for (merchant, groups) in &expected {
        let want = groups.treated.outcomes + groups.holdout.outcomes + groups.shadow.outcomes;
        loop {
            let got = uplift(&app, merchant, 1).await.unwrap();
            let outcomes = |stats: &Option<pb::GroupStats>| stats.as_ref().unwrap().outcomes;
            if outcomes(&got.treated) + outcomes(&got.holdout) + outcomes(&got.shadow) == want {
                break;
            }
            assert!(
                answered.elapsed() < Duration::from_secs(2),
                "{merchant}: not visible within 2 s: {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (merchant, groups) in &expected {
        for days in [0, 1, 35] {
            check(
                merchant,
                groups,
                &uplift(&app, merchant, days).await.unwrap(),
            );
        }
    }
    let off = uplift(&app, OFF, 0).await.unwrap();
    assert_eq!(off.treated.unwrap().outcomes, 0, "mode off counts nothing");
    assert_eq!(expected[SHADOW].holdout, Expected::default());

    // The metric counts what was tallied, by group and outcome.
    let metrics = app.scrape().await;
    let series = |group: &str, outcome: &str| {
        sample(
            &metrics,
            &format!(
                "sticky_routing_experiment_outcomes_total{{group=\"{group}\",outcome=\"{outcome}\"}}"
            ),
        )
        .unwrap_or(0.0) as u64
    };
    for (group, counts) in [
        ("treated", on.treated),
        ("holdout", on.holdout),
        ("shadow", expected[SHADOW].shadow),
    ] {
        assert_eq!(series(group, "success"), counts.successes, "{group}");
        assert_eq!(
            series(group, "failure"),
            counts.outcomes - counts.successes,
            "{group}"
        );
    }

    // The report: every merchant with counts (not the one in mode off),
    // GetUplift's numbers under its names.
    let output = report(app.redis.url(), &["--format", "json", "--days", "2"]).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let merchants: Vec<&str> = lines
        .iter()
        .map(|l| l["merchant_id"].as_str().unwrap())
        .collect();
    assert_eq!(merchants, [ON, SHADOW]);
    for line in &lines {
        let merchant = line["merchant_id"].as_str().unwrap();
        let groups = &expected[merchant];
        assert_eq!(line["days"], 2);
        let got = pb::GetUpliftResponse {
            treated: Some(stats(&line["treated"])),
            holdout: Some(stats(&line["holdout"])),
            shadow: Some(stats(&line["shadow"])),
            difference: line["difference"].as_f64().unwrap(),
            ci_low: line["ci_low"].as_f64().unwrap(),
            ci_high: line["ci_high"].as_f64().unwrap(),
            enough_data: line["enough_data"].as_bool().unwrap(),
        };
        check(merchant, groups, &got);
        let follow = if groups.treated.outcomes == 0 {
            0.0
        } else {
            groups.treated.followed as f64 / groups.treated.outcomes as f64
        };
        assert!((line["follow_rate"].as_f64().unwrap() - follow).abs() < 1e-12);
    }
    // One merchant asked for by name, even with nothing counted; and the
    // table a person reads.
    let output = report(app.redis.url(), &["--format=json", "--merchant", OFF]).await;
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (
            line["merchant_id"].as_str(),
            line["treated"]["outcomes"].as_u64()
        ),
        (Some(OFF), Some(0))
    );
    let output = report(app.redis.url(), &["--merchant", ON]).await;
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with(&format!("merchant {ON}: last 7 UTC days\n")),
        "{text}"
    );
    assert!(text.contains("95% CI ["), "{text}");
    assert!(!text.contains(SHADOW), "{text}");

    app.assert_every_key_has_a_ttl().await;
    assert!(started.elapsed() < Duration::from_secs(60));
}

fn stats(group: &serde_json::Value) -> pb::GroupStats {
    let number = |name: &str| group[name].as_u64().unwrap();
    pb::GroupStats {
        outcomes: number("outcomes"),
        successes: number("successes"),
        success_rate: group["success_rate"].as_f64().unwrap(),
        followed: number("followed"),
        overridden: number("overridden"),
    }
}

#[tokio::test]
async fn get_uplift_checks_its_request_and_counts_reach_redis_by_the_stop() {
    let app = spawn_app().await;
    for (merchant, days, field) in [
        ("m1", 36, "days"),
        ("m1", u32::MAX, "days"),
        (" ", 7, "merchant_id"),
    ] {
        let status = uplift(&app, merchant, days).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{status:?}");
    }
    // Nothing counted: zeros, no interval, not enough data.
    let empty = uplift(&app, "m1", 0).await.unwrap();
    assert_eq!(empty.treated.unwrap().outcomes, 0);
    assert_eq!(
        (
            empty.difference,
            empty.ci_low,
            empty.ci_high,
            empty.enough_data
        ),
        (0.0, 0.0, 0.0, false)
    );
    // Counts recorded just before a stop reach Redis (the last push onto
    // the shard's log, or the tick before it), where another instance
    // reads them.
    let mut request = outcome("m1", "c1", "A", pb::Outcome::Success);
    request.pin_connector = "A".into();
    app.record(request).await.unwrap();
    let mut app = app;
    app.stop().await.unwrap();
    let keys = app.keys().await;
    let m1 = sticky_routing::domain::ids::MerchantId::parse("m1").unwrap();
    let shard = sticky_routing::domain::shards::shard_of(
        &sticky_routing::domain::tenant::Tenant::DEFAULT,
        &m1,
    );
    let log = sticky_routing::domain::keys::experiment_log_key(shard);
    assert!(keys.iter().any(|k| k.ends_with(&log)), "{keys:?}");
}
