//! The windows' fold, bound and read offsets.

use super::*;

fn settings() -> BreakerSettings {
    BreakerSettings {
        window: std::time::Duration::from_secs(10),
        ..BreakerSettings::DEFAULT
    }
}

const B: i64 = 1_000; // the bucket of a 10 s window

fn record(m: &str, c: &str, bucket: i64, calls: u64, failures: u64) -> LogRecord {
    LogRecord {
        tenant: Tenant::DEFAULT,
        merchant: m.to_owned(),
        connector: c.to_owned(),
        bucket,
        counts: Counts { calls, failures },
    }
}

fn counts(calls: u64, failures: u64) -> Counts {
    Counts { calls, failures }
}

#[test]
fn records_fold_into_their_windows_and_age_out() {
    let s = BreakerSettings {
        min_calls: 4,
        ..settings()
    };
    let windows = Windows::new(100);
    let now = 100 * B;
    let folded = windows.fold(
        vec![
            record("m", "a", 99, 2, 1),
            record("m", "a", 100, 1, 0),
            record("m", "a", 99, 1, 1),
            record("m", "b", 100, 4, 0),
            // Too old to count: not folded at all.
            record("m", "c", 80, 9, 9),
        ],
        now,
        &s,
        |_, _, _| false,
    );
    // "a" (4 calls, 2 failures) may trip; "b" (no failure) cannot.
    let names: Vec<&str> = folded.iter().map(|(_, _, c)| c.as_str()).collect();
    assert_eq!(names, ["a"], "each window that may trip, once: {folded:?}");
    let a = windows.window(&Tenant::DEFAULT, "m", "a").unwrap();
    assert_eq!(a.counts(now, &s), counts(4, 2));
    assert_eq!(
        windows.of_merchant(&Tenant::DEFAULT, "m", now, &s),
        vec![
            ("a".to_owned(), counts(4, 2)),
            ("b".to_owned(), counts(4, 0))
        ]
    );
    // Bucket 99 counts until its end plus the window: 110 s.
    assert_eq!(a.counts(110 * B - 1, &s), counts(4, 2));
    assert_eq!(a.counts(110 * B, &s), counts(1, 0));
    windows.prune(111 * B, &s);
    assert_eq!(windows.len(), 0, "aged-out windows go");
}

#[test]
fn a_tripped_breaker_counts_nothing_and_a_cleared_window_starts_afresh() {
    let s = settings();
    let windows = Windows::new(100);
    let now = 100 * B;
    windows.fold(vec![record("m", "a", 100, 5, 5)], now, &s, |_, _, _| false);
    windows.clear(&Tenant::DEFAULT, "m", "a");
    let folded = windows.fold(vec![record("m", "a", 100, 3, 3)], now, &s, |_, m, c| {
        (m, c) == ("m", "a")
    });
    assert!(folded.is_empty());
    assert!(windows.window(&Tenant::DEFAULT, "m", "a").is_none());
}

#[test]
fn two_tenants_with_the_same_merchant_and_connector_keep_two_windows() {
    let s = settings();
    let windows = Windows::new(100);
    let now = 100 * B;
    let acme = Tenant::parse("acme").unwrap();
    let mut theirs = record("m", "a", 100, 7, 7);
    theirs.tenant = acme.clone();
    windows.fold(
        vec![record("m", "a", 100, 1, 0), theirs],
        now,
        &s,
        |_, _, _| false,
    );
    assert_eq!(
        windows.of_merchant(&Tenant::DEFAULT, "m", now, &s)[0].1,
        counts(1, 0)
    );
    assert_eq!(windows.of_merchant(&acme, "m", now, &s)[0].1, counts(7, 7));
}

#[test]
fn past_the_bound_the_windows_folded_into_least_recently_go() {
    let s = settings();
    let windows = Windows::new(3);
    for (n, m) in ["m1", "m2", "m3", "m4", "m5"].iter().enumerate() {
        let now = 100 * B + n as i64;
        windows.fold(vec![record(m, "a", 100, 1, 0)], now, &s, |_, _, _| false);
    }
    windows.prune(100 * B + 10, &s);
    assert_eq!(windows.len(), 3);
    assert!(windows.window(&Tenant::DEFAULT, "m2", "a").is_none());
    assert!(windows.window(&Tenant::DEFAULT, "m3", "a").is_some());
    // All folded in one tick: exactly the bound stays.
    let windows = Windows::new(3);
    let many: Vec<_> = (0..10)
        .map(|n| record(&format!("m{n}"), "a", 100, 1, 0))
        .collect();
    windows.fold(many, 100 * B, &s, |_, _, _| false);
    windows.prune(100 * B, &s);
    assert_eq!(windows.len(), 3);
}

#[test]
fn reads_cover_the_window_first_then_what_is_new() {
    let s = settings();
    let windows = Windows::new(100);
    let shard = Shard::all().next().unwrap();
    let now = 100 * B;
    let first = windows.reads(shard, now, &s);
    // The whole window (ring_len buckets back, and one more) to the next.
    assert_eq!(first.first().unwrap().0, 100 - s.ring_len() - 1);
    assert_eq!(first.last().unwrap(), &(101, 0));
    let consumed: Vec<u64> = first
        .iter()
        .map(|&(period, _)| u64::from(period == 100) * 40)
        .collect();
    windows.advance(shard, &first, &consumed, now, &s);
    let next = windows.reads(shard, now + 500, &s);
    assert_eq!(next, vec![(99, 0), (100, 40), (101, 0)]);
    // A tick later in the next bucket: the offsets carry over.
    let later = windows.reads(shard, 101 * B, &s);
    assert_eq!(later, vec![(99, 0), (100, 40), (101, 0), (102, 0)]);
}

/// What a window costs this process, as the platform folds them: 100,000
/// merchants of 10 tenants, one connector each, one call in one bucket.
/// Not a check: a probe run by hand (`cargo test --release --lib
/// window_memory -- --ignored --nocapture`), from the process's resident
/// memory before and after.
#[test]
#[ignore = "a measurement, run by hand"]
fn window_memory() {
    fn rss() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    }
    let s = BreakerSettings::DEFAULT;
    let now = 1_800_000_000_000;
    let tenants: Vec<Tenant> = (0..10)
        .map(|t| Tenant::parse(&format!("tenant_{t}")).unwrap())
        .collect();
    let records: Vec<LogRecord> = (0..100_000)
        .map(|m| LogRecord {
            tenant: tenants[m % 10].clone(),
            merchant: format!("merchant_{m}"),
            connector: "GIGADAT".into(),
            bucket: s.bucket_of(now),
            counts: counts(1, 0),
        })
        .collect();
    let windows = Windows::new(1_000_000);
    let before = rss();
    windows.fold(records, now, &s, |_, _, _| false);
    let after = rss();
    assert_eq!(windows.len(), 100_000);
    println!(
        "{} bytes per window (resident memory, 100,000 windows)",
        (after - before) / 100_000
    );
}
