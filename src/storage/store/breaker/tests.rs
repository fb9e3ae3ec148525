//! The breaker codec's pure parts: the index's values, the flush's reply
//! and GetConnectorHealth's rows from what Redis holds and the engine's
//! windows.

use super::codec::{
    flush_reply, index_entries, merchant_reply, override_value, parse_index_trip, parse_override,
    parse_trip, trip_value,
};
use super::health::health_rows;
use super::*;
use crate::domain::breaker::Override;
use crate::domain::keys::{index_override_field, index_trip_field};
use crate::storage::error::NotApplied;

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
fn a_trip_seen_half_open_reads_back_the_same() {
    let tripped = Tripped {
        open_until_ms: 5,
        calls: 20,
        failures: 10,
    };
    assert_eq!(parse_index_trip("5 20 10 h"), Some(tripped));
    assert_eq!(parse_index_trip("5 20 10"), Some(tripped));
    assert_eq!(parse_index_trip("5 20 10 x"), None);
    assert_eq!(parse_trip("5 20 10 h"), None, "the counts hash never marks");
}

#[test]
fn the_flush_reply_is_read_per_connector_and_odd_ones_are_errors() {
    let tally = |c: &str| ConnectorTally {
        connector: c.into(),
        buckets: vec![],
        probes: None,
    };
    let tallies = [tally("a"), tally("b")];
    // a: CLOSED; b: OPEN until 500 with 2 probes so far.
    let reply = [1, 0, 0, 0, 0, 0, 500, 20, 10, 2, 1];
    let snapshots = merchant_reply(&reply, &tallies).unwrap();
    assert_eq!(snapshots[0].tripped, None);
    assert_eq!(snapshots[0].probes, Counts::default());
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
        merchant_reply(&reply[..10], &tallies),
        Err(StorageError::Unexpected(_))
    ));
    assert!(matches!(
        merchant_reply(&[1, 0, 0, 0, -3, 0], &tallies[..1]),
        Err(StorageError::Unexpected(_))
    ));
    assert!(matches!(
        merchant_reply(&[-1], &tallies),
        Err(StorageError::ForeignValue { .. })
    ));
    assert!(matches!(
        merchant_reply(&[-2], &tallies),
        Err(StorageError::Unavailable {
            why: NotApplied::Permission,
            ..
        })
    ));
}

#[test]
fn a_shards_reply_has_each_merchants_answer_its_index_and_its_events() {
    use fred::prelude::Value;
    let m = MerchantId::parse("m").unwrap();
    let merchants = [MerchantTallies {
        tenant: Tenant::DEFAULT,
        merchant: m.clone(),
        tallies: vec![ConnectorTally {
            connector: "a".into(),
            buckets: vec![],
            probes: None,
        }],
    }];
    let log_of = [MerchantTallies {
        tenant: Tenant::DEFAULT,
        merchant: m.clone(),
        tallies: vec![ConnectorTally {
            connector: "a".into(),
            buckets: vec![(
                7,
                Counts {
                    calls: 1,
                    failures: 0,
                },
            )],
            probes: None,
        }],
    }];
    // A merchant's reply is its numbers packed as i8s (breaker_flush.lua).
    let numbers = |ns: &[i64]| {
        Value::Bytes(
            ns.iter()
                .flat_map(|n| n.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        )
    };
    let text = |t: &str| Value::from(t);
    let field = index_trip_field(&Tenant::DEFAULT, &m, "a");
    let reply = Value::Array(vec![
        Value::Integer(1),
        Value::Array(vec![numbers(&[1, 0, 0, 0, 0, 0])]),
        Value::Array(vec![text(&field), text("5 20 10 h")]),
        Value::Array(vec![text(&field), text("5 20 10 h"), text("half_open")]),
        Value::Array(vec![Value::Bytes(log_frames(&log_of).into())]),
    ]);
    let (snapshots, index, timed, log) = flush_reply(reply, &merchants, 1).unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].records.len(), 1);
    assert_eq!(snapshots.len(), 1);
    assert!(snapshots[0].is_ok());
    assert_eq!(index.len(), 1);
    assert_eq!(index[0].tripped.map(|t| t.open_until_ms), Some(5));
    assert_eq!(timed.len(), 1);
    assert_eq!(timed[0].kind, TimeTransition::HalfOpen);
    assert_eq!(
        (timed[0].merchant.as_str(), timed[0].connector.as_str()),
        ("m", "a")
    );
    // One merchant's error is that merchant's alone.
    let reply = Value::Array(vec![
        Value::Integer(1),
        Value::Array(vec![numbers(&[-1])]),
        Value::Array(vec![]),
        Value::Array(vec![]),
        Value::Array(vec![]),
    ]);
    let (snapshots, _, _, _) = flush_reply(reply, &merchants, 0).unwrap();
    assert!(matches!(
        snapshots[0],
        Err(StorageError::ForeignValue { .. })
    ));
    // A reply of another shape is an error.
    let odd = Value::Array(vec![Value::Integer(1), Value::Array(vec![])]);
    assert!(matches!(
        flush_reply(odd, &merchants, 0),
        Err(StorageError::Unexpected(_))
    ));
    assert!(index_entries(vec![("junk".into(), "1 2 3".into())]).is_empty());
}

#[test]
fn health_prefers_the_hashs_trip_and_drops_an_index_trip_it_closed() {
    let s = settings();
    let m = MerchantId::parse("m").unwrap();
    let other = MerchantId::parse("m2").unwrap();
    let d = &Tenant::DEFAULT;
    let acme = Tenant::parse("acme").unwrap();
    let pair = |f: String, v: &str| (f, v.to_owned());
    let text = |f: &str, v: &str| (f.to_owned(), v.as_bytes().to_vec());
    // A ring of the layout before the counts log: not read.
    let ring: Vec<u8> = [1i64, 5, 2].iter().flat_map(|n| n.to_le_bytes()).collect();
    let counts = vec![
        text("t:a", "1000 20 10"),
        text("hc:a", "2"),
        text("hf:a", "1"),
        text("x:b", "900"),
        ("r:h".to_owned(), ring),
    ];
    let index = vec![
        pair(index_trip_field(d, &m, "a"), "999 1 1"),
        pair(index_trip_field(d, &m, "b"), "900 5 5"),
        pair(index_trip_field(d, &m, "c"), "1500 7 4"),
        pair(index_trip_field(d, &other, "d"), "1500 7 4"),
        pair(index_override_field(d, &m, "e"), "1200 open"),
        pair(index_override_field(d, &m, "f"), "1100 closed"),
        // Another tenant's breakers of the same merchant id: not these.
        pair(index_trip_field(&acme, &m, "g"), "1500 7 4"),
        pair(index_override_field(&acme, &m, "c"), "1200 closed"),
    ];
    // The engine's windows: h's.
    let windows = [(
        "h".to_owned(),
        Counts {
            calls: 5,
            failures: 2,
        },
    )];
    let rows = health_rows(d, &m, &counts, &index, &windows, 1100, &s).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.connector.as_str()).collect();
    // b: its index trip was closed (x = its T); f: its override is over.
    assert_eq!(names, ["a", "c", "e", "h"]);
    assert_eq!(rows[3].state, BreakerState::Closed);
    assert_eq!(
        rows[3].counts,
        Counts {
            calls: 5,
            failures: 2
        }
    );
    // An old ring, even one this service never wrote, is not read.
    let odd = [("r:h".to_owned(), b"1 5 2".to_vec())];
    let rows_odd = health_rows(d, &m, &odd, &index, &[], 1100, &s).unwrap();
    assert!(rows_odd.iter().all(|r| r.connector != "h"));
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

#[test]
fn health_reads_only_the_calls_tenants_fields_of_the_shared_index() {
    let s = settings();
    let m = MerchantId::parse("m").unwrap();
    let acme = Tenant::parse("acme").unwrap();
    let pair = |f: String, v: &str| (f, v.to_owned());
    let index = vec![
        pair(index_trip_field(&Tenant::DEFAULT, &m, "a"), "1500 7 4"),
        pair(index_trip_field(&acme, &m, "b"), "1500 9 9"),
        pair(index_override_field(&acme, &m, "a"), "1200 open"),
        pair(
            index_trip_field(&Tenant::parse("globex").unwrap(), &m, "b"),
            "1500 1 1",
        ),
    ];
    let rows = health_rows(&acme, &m, &[], &index, &[], 1100, &s).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.connector.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    // acme's `a` has only its override: the default tenant's trip of `a`
    // is another breaker.
    assert_eq!(rows[0].state, BreakerState::Closed);
    assert_eq!(rows[0].over.map(|o| o.kind), Some(Override::ForceOpen));
    assert_eq!(rows[1].state, BreakerState::Open { until_ms: 1500 });
    assert_eq!(
        rows[1].counts,
        Counts {
            calls: 9,
            failures: 9
        }
    );
    let rows = health_rows(&Tenant::DEFAULT, &m, &[], &index, &[], 1100, &s).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].connector.as_str(), rows[0].over), ("a", None));
}
