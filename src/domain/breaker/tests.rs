//! Tests of the breaker's rules, and a whole state machine built from them
//! held to contract v1.2 §3.

use super::*;

#[test]
fn ten_failures_in_twenty_calls_trip_at_half() {
    let s = BreakerSettings::DEFAULT;
    assert!(trips(
        Counts {
            calls: 20,
            failures: 10
        },
        &s
    ));
    assert!(!trips(
        Counts {
            calls: 20,
            failures: 9
        },
        &s
    ));
    assert!(!trips(
        Counts {
            calls: 19,
            failures: 19
        },
        &s
    ));
}
