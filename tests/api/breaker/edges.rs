//! The breaker's edges a review found (issue 41), each through the API on
//! real Redis: no count lost below `MAX_TRACKED`, no OPEN or overridden
//! breaker read as CLOSED because of it, a HALF-OPEN that gives up logged
//! and counted, and a window that trips as its old calls age out.

use std::time::Duration;

use sticky_routing::domain::breaker::{BreakerSettings, Share};
use sticky_routing::transport::pb;

use super::{
    CLOSED, OPEN, connector_health, eventually, health, outcomes, set_override, state_is, vetoes,
};
use crate::support::*;

fn breaker(settings: BreakerSettings) -> impl FnOnce(&mut sticky_routing::config::Settings) {
    move |s| s.breaker = Some(settings)
}

/// With 16 pairs allowed, 8 connectors' 25 failures each all count and all
/// 8 breakers open (the bound was 16 shards of one pair each, and a pair
/// was evicted with its counts: 151 and 77 of 200 counted, 3 of 8 open).
#[tokio::test]
async fn below_max_tracked_no_count_is_lost_and_every_breaker_trips() {
    let app = spawn_app_with(breaker(BreakerSettings {
        max_tracked: 16,
        min_calls: 20,
        ..BreakerSettings::DEFAULT
    }))
    .await;
    let connectors: Vec<String> = (0..8).map(|i| format!("C{i}")).collect();
    for round in 0..25 {
        for connector in &connectors {
            let customer = format!("x{round}");
            app.record(outcome(
                "m1",
                &customer,
                connector,
                pb::Outcome::GatewayFailure,
            ))
            .await
            .unwrap();
        }
    }
    eventually(Duration::from_secs(3), "all eight open", || async {
        let rows = health(&app, "m1").await.unwrap();
        rows.len() == 8 && rows.iter().all(|r| r.state == OPEN)
    })
    .await;
    for row in health(&app, "m1").await.unwrap() {
        assert_eq!((row.calls, row.failures), (25, 25), "{}", row.connector);
    }
}

/// With `MAX_TRACKED` 2, a third FORCE_OPEN, answered OK, is still seen by
/// GetPin: the bound never turns an OPEN or overridden breaker CLOSED.
#[tokio::test]
async fn max_tracked_never_reads_a_forced_open_breaker_as_closed() {
    let app = spawn_app_with(breaker(BreakerSettings {
        max_tracked: 2,
        ..BreakerSettings::DEFAULT
    }))
    .await;
    // Habits on all three, so each is a candidate GetPin vetoes.
    for (connector, times) in [("A", 3), ("B", 2), ("C", 1)] {
        for _ in 0..times {
            app.success("c", connector).await;
        }
    }
    for connector in ["A", "B", "C"] {
        set_override(&app, connector, pb::BreakerOverride::ForceOpen as i32, 600)
            .await
            .unwrap();
    }
    // Past a poll (every instance within 2 s), all three are vetoed.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let pin = app.pin(pin_request("c", &["A", "B", "C"])).await.unwrap();
    let mut vetoed = vetoes(&pin);
    vetoed.sort();
    let forced = pb::VetoReason::ForcedOpen as i32;
    assert_eq!(
        vetoed,
        [("A", forced), ("B", forced), ("C", forced)],
        "{pin:?}"
    );
    assert!(pin.connector.is_empty());
}

/// A HALF-OPEN that does not decide within 2 × WINDOW closes, and that
/// transition is counted (and logged) like every other.
#[tokio::test]
async fn a_half_open_that_gives_up_is_counted() {
    let app = spawn_app_with(breaker(BreakerSettings {
        window: Duration::from_secs(1),
        open_for: Duration::from_secs(1),
        min_calls: 4,
        probe_calls: 100,
        probe_share: Share::new(0.01).unwrap(),
        ..BreakerSettings::DEFAULT
    }))
    .await;
    outcomes(&app, "A", pb::Outcome::GatewayFailure, 4).await;
    eventually(Duration::from_secs(3), "open", || state_is(&app, "A", OPEN)).await;
    // OPEN 1 s, HALF-OPEN 2 s with no probe: CLOSED again (a CLOSED
    // breaker with no calls in its window has no row).
    eventually(Duration::from_secs(6), "closed", || async {
        connector_health(&app, "A")
            .await
            .is_none_or(|row| row.state == CLOSED)
    })
    .await;
    let transition = |from: &'static str, to: &'static str| {
        let app = &app;
        async move {
            let metrics = app.scrape().await;
            let series =
                format!("sticky_routing_breaker_transitions_total{{from=\"{from}\",to=\"{to}\"}}");
            sample(&metrics, &series).unwrap_or(0.0)
        }
    };
    eventually(Duration::from_secs(2), "counted", || async {
        transition("half_open", "closed").await == 1.0
    })
    .await;
    assert_eq!(transition("closed", "open").await, 1.0);
    assert_eq!(transition("open", "half_open").await, 1.0);
}

/// WINDOW 2 s, MIN_CALLS 4: five successes, then four failures a second
/// later, is 4 of 9 (no trip); once the successes age out the window is
/// 4 of 4, and the breaker trips with no further call.
#[tokio::test]
async fn a_window_that_trips_as_old_successes_age_out_trips_without_a_call() {
    let app = spawn_app_with(breaker(BreakerSettings {
        window: Duration::from_secs(2),
        min_calls: 4,
        ..BreakerSettings::DEFAULT
    }))
    .await;
    outcomes(&app, "A", pb::Outcome::Success, 5).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    outcomes(&app, "A", pb::Outcome::GatewayFailure, 4).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(state_is(&app, "A", CLOSED).await, "not yet");
    // The successes leave the window by 2.2 s after they came (a call
    // counts for at most WINDOW plus a bucket), then a tick or two.
    eventually(Duration::from_secs(3), "open by aging", || {
        state_is(&app, "A", OPEN)
    })
    .await;
    let row = health(&app, "m1").await.unwrap().remove(0);
    assert_eq!((row.calls, row.failures), (4, 4));
}
