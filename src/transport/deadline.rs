//! The caller's deadline, from the `grpc-timeout` header.
//!
//! tonic's own server timeout answers `CANCELLED`; the contract wants
//! `DEADLINE_EXCEEDED`, and the Redis calls need to know how long they may
//! take, so the handlers read the header themselves.

use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;

/// The most the handler's deadline runs ahead of the caller's.
const MAX_MARGIN: Duration = Duration::from_millis(5);

/// When the call must be answered by: a little before the caller's deadline,
/// capped by `ceiling` so that a call without a deadline is still bounded.
///
/// tonic's server also times the call from the same header and answers
/// `CANCELLED` when it fires; finishing a margin earlier (a tenth of the
/// timeout, at most 5 ms) lets the handler's `DEADLINE_EXCEEDED` win.
pub fn deadline_of(metadata: &MetadataMap, ceiling: Duration) -> Instant {
    let budget = metadata
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .map_or(ceiling, |d| (d - (d / 10).min(MAX_MARGIN)).min(ceiling));
    let now = Instant::now();
    // No budget this service sets can overflow, but an `Instant` sum that
    // did would panic inside a request: fall back on a day.
    now.checked_add(budget)
        .unwrap_or_else(|| now + Duration::from_secs(86_400))
}

/// Parses `TimeoutValue TimeoutUnit`: at most 8 digits and one of H M S m u n.
pub fn parse_grpc_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("99u"), Some(Duration::from_micros(99)));
        assert_eq!(parse_grpc_timeout("5n"), Some(Duration::from_nanos(5)));
    }

    #[test]
    fn rejects_malformed_values() {
        for bad in ["", "S", "123456789S", "1x", "-1S", "1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_ceiling_bounds_a_missing_or_long_deadline() {
        let mut metadata = MetadataMap::new();
        let before = Instant::now();
        assert!(
            deadline_of(&metadata, Duration::from_secs(1))
                <= Instant::now() + Duration::from_secs(1)
        );
        metadata.insert("grpc-timeout", "10m".parse().unwrap());
        let deadline = deadline_of(&metadata, Duration::from_secs(1));
        assert!(
            deadline <= Instant::now() + Duration::from_millis(9),
            "a margin before the caller's"
        );
        assert!(deadline >= before + Duration::from_millis(9));
    }

    #[test]
    fn a_huge_ceiling_or_timeout_never_overflows() {
        let mut metadata = MetadataMap::new();
        assert!(deadline_of(&metadata, Duration::MAX) > Instant::now());
        metadata.insert("grpc-timeout", "99999999H".parse().unwrap());
        assert!(deadline_of(&metadata, Duration::MAX) > Instant::now());
        assert_eq!(crate::record::call_ceiling(Duration::MAX), Duration::MAX);
    }
}
