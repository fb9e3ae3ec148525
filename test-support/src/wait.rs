//! Polling until a condition holds, with a deadline that fails the test.

use std::time::{Duration, Instant};

/// Calls `probe` every `every` until it gives a value, and returns it;
/// fails the test with `what` if `within` passes first.
pub fn wait_for<T>(
    within: Duration,
    every: Duration,
    what: &str,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(every);
    }
}

/// Waits (every 50 ms) until `ready` holds; fails the test with `what` if
/// `within` passes first.
pub fn wait_until(within: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    wait_for(within, Duration::from_millis(50), what, || {
        ready().then_some(())
    });
}
