//! The breaker codec's pure parts: the index's values and GetConnectorHealth's
//! rows from what Redis holds.

use super::*;

fn settings() -> BreakerSettings {
    BreakerSettings {
        window: std::time::Duration::from_secs(10),
        open_for: std::time::Duration::from_secs(5),
        ..BreakerSettings::DEFAULT
    }
}

#[test]
fn index_values_read_back_as_written() {
    let tripped = Tripped {
        open_until_ms: 1_700_000_000_123,
        calls: 20,
        failures: 10,
    };
    assert_eq!(parse_trip(&trip_value(&tripped)), Some(tripped));
    for kind in [Override::ForceOpen, Override::ForceClosed] {
        let over = OverrideUntil {
            kind,
            until_ms: 1_700_000_000_999,
        };
        assert_eq!(parse_override(&override_value(&over)), Some(over));
    }
    for odd in ["", "1 2", "1 2 3 4", "a 2 3", "1  2 3", "-"] {
        assert_eq!(parse_trip(odd), None, "{odd:?}");
    }
    for odd in ["", "1", "1 shut", "x open", "1 open "] {
        assert_eq!(parse_override(odd), None, "{odd:?}");
    }
}

#[test]
fn the_flush_reply_is_read_per_connector_and_odd_ones_are_errors() {
    let tally = |c: &str| ConnectorTally {
        connector: c.into(),
        buckets: vec![],
        probes: None,
    };
    let tallies = [tally("a"), tally("b")];
    let reply = [1, 3, 1, 0, 0, 0, 0, 0, 0, 0, 500, 20, 10, 2, 1];
    let snapshots = flush_reply(&reply, &tallies).unwrap();
    assert_eq!(
        snapshots[0].window,
        Counts {
            calls: 3,
            failures: 1
        }
    );
    assert_eq!(snapshots[0].tripped, None);
    assert_eq!(
        snapshots[1].tripped,
        Some(Tripped {
            open_until_ms: 500,
            calls: 20,
            failures: 10
        })
    );
    assert_eq!(
        snapshots[1].probes,
        Counts {
            calls: 2,
            failures: 1
        }
    );
    assert!(matches!(
        flush_reply(&reply[..8], &tallies),
        Err(StorageError::Unexpected(_))
    ));
    assert!(matches!(
        flush_reply(&[1, -3, 1, 0, 0, 0, 0, 0], &tallies[..1]),
        Err(StorageError::Unexpected(_))
    ));
    assert!(matches!(
        flush_reply(&[-1], &tallies),
        Err(StorageError::ForeignValue { .. })
    ));
    assert!(matches!(
        flush_reply(&[-2], &tallies),
        Err(StorageError::Unavailable {
            why: NotApplied::Permission,
            ..
        })
    ));
}

#[test]
fn health_prefers_the_hashs_trip_and_drops_an_index_trip_it_closed() {
    let s = settings();
    let m = MerchantId::parse("m").unwrap();
    let other = MerchantId::parse("m2").unwrap();
    let pair = |f: String, v: &str| (f, v.to_owned());
    let counts = vec![
        pair("t:a".into(), "1000 20 10"),
        pair("hc:a".into(), "2"),
        pair("hf:a".into(), "1"),
        pair("x:b".into(), "900"),
    ];
    let index = vec![
        pair(index_trip_field(&m, "a"), "999 1 1"),
        pair(index_trip_field(&m, "b"), "900 5 5"),
        pair(index_trip_field(&m, "c"), "1500 7 4"),
        pair(index_trip_field(&other, "d"), "1500 7 4"),
        pair(index_override_field(&m, "e"), "1200 open"),
        pair(index_override_field(&m, "f"), "1100 closed"),
    ];
    let rows = health_rows(&m, &counts, &index, 1100, &s).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.connector.as_str()).collect();
    // b: its index trip was closed (x = its T); f: its override is over.
    assert_eq!(names, ["a", "c", "e"]);
    assert_eq!(rows[0].state, BreakerState::HalfOpen { since_ms: 1000 });
    assert_eq!(
        rows[0].counts,
        Counts {
            calls: 2,
            failures: 1
        }
    );
    assert_eq!(rows[0].open_until_ms, 0);
    assert_eq!(rows[1].state, BreakerState::Open { until_ms: 1500 });
    assert_eq!(
        rows[1].counts,
        Counts {
            calls: 7,
            failures: 4
        }
    );
    assert_eq!(rows[1].open_until_ms, 1500);
    assert_eq!(rows[2].state, BreakerState::Closed);
    assert_eq!(
        rows[2].over,
        Some(OverrideUntil {
            kind: Override::ForceOpen,
            until_ms: 1200
        })
    );
}
