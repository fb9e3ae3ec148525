//! The replay command's harness (`sticky-routing replay`): history rows and
//! their CSV and JSON Lines files, generated histories, the binary run
//! without Redis, and the report's figures computed as contract v1.2 §5
//! defines them, to compare with what the command prints.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use serde::Deserialize;

use crate::support::bulk::{Ran, Rng, run_command};
use crate::support::free_port;

/// Every column replay reads, `at` last.
pub(crate) const REPLAY_HEADER: &str = "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome,count,attempt_id,at\n";

/// 2026-03-01T12:00:00Z in Unix milliseconds: where generated times start.
pub(crate) const BASE_MS: i64 = 1_772_366_400_000;

/// The payment methods of generated rows, each with three connectors, so
/// that a customer can hold more combos of one method than a small cap.
pub(crate) const METHODS: [(&str, &str, [&str; 3]); 2] = [
    ("card", "credit", ["stripe", "adyen", "checkout"]),
    ("interac", "rtp", ["GIGADAT", "LOONIO", "PAYBILT"]),
];

/// When a row says it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    /// No `at`: one second after the row before (the first at 0).
    Absent,
    /// Unix seconds, with a decimal fraction when not whole.
    Unix(i64),
    /// RFC 3339 with this UTC offset in minutes (0 is written `Z`).
    Rfc3339 { ms: i64, offset_minutes: i64 },
}

impl At {
    /// The time in Unix milliseconds, `None` when absent.
    pub fn ms(self) -> Option<i64> {
        match self {
            Self::Absent => None,
            Self::Unix(ms) | Self::Rfc3339 { ms, .. } => Some(ms),
        }
    }

    /// The cell's text (empty when absent).
    pub fn text(self) -> String {
        match self {
            Self::Absent => String::new(),
            Self::Unix(ms) => unix_seconds(ms),
            Self::Rfc3339 { ms, offset_minutes } => rfc3339(ms, offset_minutes),
        }
    }
}

/// `ms` as Unix seconds: whole, or with three decimals.
pub(crate) fn unix_seconds(ms: i64) -> String {
    let (seconds, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    if millis == 0 {
        seconds.to_string()
    } else {
        format!("{seconds}.{millis:03}")
    }
}

/// `ms` as RFC 3339 at a UTC offset: the local time with the offset after
/// it (`Z` for 0), milliseconds shown only when not whole.
pub(crate) fn rfc3339(ms: i64, offset_minutes: i64) -> String {
    let local = u64::try_from(ms + offset_minutes * 60_000).unwrap();
    let local = UNIX_EPOCH + Duration::from_millis(local);
    let text = if ms % 1000 == 0 {
        humantime::format_rfc3339_seconds(local).to_string()
    } else {
        humantime::format_rfc3339_millis(local).to_string()
    };
    if offset_minutes == 0 {
        return text;
    }
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let (hours, minutes) = (offset_minutes.abs() / 60, offset_minutes.abs() % 60);
    format!(
        "{}{sign}{hours:02}:{minutes:02}",
        text.strip_suffix('Z').unwrap()
    )
}

/// One row of a history.
#[derive(Debug, Clone)]
pub(crate) struct HistoryRow {
    pub merchant: String,
    pub customer: String,
    pub method: String,
    pub method_type: String,
    pub connector: String,
    pub success: bool,
    /// How many identical attempts the row stands for (1 is written empty).
    pub count: u32,
    pub attempt_id: Option<String>,
    pub at: At,
}

impl HistoryRow {
    /// A success of `customer` of `merchant` with card/credit through
    /// `connector`, once, without an attempt id or `at`.
    pub fn card(merchant: &str, customer: &str, connector: &str) -> Self {
        Self {
            merchant: merchant.into(),
            customer: customer.into(),
            method: "card".into(),
            method_type: "credit".into(),
            connector: connector.into(),
            success: true,
            count: 1,
            attempt_id: None,
            at: At::Absent,
        }
    }

    pub fn failed(self) -> Self {
        Self {
            success: false,
            ..self
        }
    }

    pub fn at(self, at: At) -> Self {
        Self { at, ..self }
    }

    pub fn times(self, count: u32) -> Self {
        Self { count, ..self }
    }

    pub fn attempt(self, id: &str) -> Self {
        Self {
            attempt_id: Some(id.into()),
            ..self
        }
    }

    pub fn outcome_word(&self) -> &'static str {
        if self.success {
            "success"
        } else {
            "gateway_failure"
        }
    }

    /// `{PM}:{PMT}:` of the row: its payment method and type upper-cased.
    pub fn prefix(&self) -> String {
        format!(
            "{}:{}:",
            self.method.trim().to_uppercase(),
            self.method_type.trim().to_uppercase()
        )
    }

    /// The hash field the row writes.
    pub fn field(&self) -> String {
        format!("{}{}", self.prefix(), self.connector)
    }

    fn count_text(&self) -> String {
        if self.count == 1 {
            String::new()
        } else {
            self.count.to_string()
        }
    }

    /// The row as a CSV line under [`REPLAY_HEADER`] (no quoting: generated
    /// ids hold no comma or quote).
    pub fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{}\n",
            self.merchant,
            self.customer,
            self.method,
            self.method_type,
            self.connector,
            self.outcome_word(),
            self.count_text(),
            self.attempt_id.as_deref().unwrap_or_default(),
            self.at.text()
        )
    }

    /// The row as one JSON Lines object: `at` a number when written as Unix
    /// seconds, a string when RFC 3339, absent when absent; `count` a
    /// number.
    pub fn jsonl(&self) -> String {
        let mut object = serde_json::json!({
            "merchant_id": self.merchant,
            "customer_id": self.customer,
            "payment_method": self.method,
            "payment_method_type": self.method_type,
            "connector": self.connector,
            "outcome": self.outcome_word(),
        });
        if self.count != 1 {
            object["count"] = self.count.into();
        }
        if let Some(id) = &self.attempt_id {
            object["attempt_id"] = id.as_str().into();
        }
        match self.at {
            At::Absent => format!("{object}\n"),
            // The number written as the CSV cell is (`1772366400.250`), not
            // as serde_json would print a float.
            At::Unix(ms) => {
                let text = object.to_string();
                let open = text.strip_suffix('}').unwrap();
                format!("{open},\"at\":{}}}\n", unix_seconds(ms))
            }
            at @ At::Rfc3339 { .. } => {
                object["at"] = at.text().into();
                format!("{object}\n")
            }
        }
    }
}

/// The rows as a CSV file, header first.
pub(crate) fn csv(rows: &[HistoryRow]) -> String {
    let mut text = String::from(REPLAY_HEADER);
    for row in rows {
        text.push_str(&row.csv());
    }
    text
}

/// The rows as a JSON Lines file.
pub(crate) fn jsonl(rows: &[HistoryRow]) -> String {
    rows.iter().map(HistoryRow::jsonl).collect()
}

/// What a generated history looks like.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub seed: u64,
    pub rows: usize,
    /// Merchants `m1..=mN`.
    pub merchants: u64,
    /// Customer ids `cus_0..cus_{N-1}`, under every merchant (so one id
    /// names a different customer under each merchant).
    pub customers: u64,
    /// Rows carry `at` (else every row goes without: times 0 s, 1 s, …).
    pub times: bool,
}

/// A history of `shape`: a third of it one busy customer's (`cus_0` of
/// `m1`), each customer mostly paying through a favourite connector per
/// method, with successes and gateway failures, rows standing
/// for 2 to 4 attempts, fresh attempt ids and repeats of the customer's
/// last 12 (so some repeats are of ids it has forgotten), method words in
/// either case; with `times`, times in Unix seconds (some with
/// milliseconds) and RFC 3339 (`Z` and offsets), rows without `at`, and now
/// and then a gap of over a minute.
pub(crate) fn generated_history(shape: Shape) -> Vec<HistoryRow> {
    let mut rng = Rng(shape.seed);
    let mut now = BASE_MS;
    let mut issued: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    let mut next_id = 0u64;
    let mut rows = Vec::with_capacity(shape.rows);
    for index in 0..shape.rows {
        // A third of the rows are one busy customer's, who lives long
        // enough to send more than 8 attempt ids.
        let (merchant, customer) = if rng.below(3) == 0 {
            (1, 0)
        } else {
            (1 + rng.below(shape.merchants), rng.below(shape.customers))
        };
        let (method, method_type, connectors) = METHODS[rng.below(2) as usize];
        let favourite = ((merchant * 7 + customer * 3) % 3) as usize;
        let connector = if rng.below(10) < 6 {
            connectors[favourite]
        } else {
            connectors[rng.below(3) as usize]
        };
        let success = rng.below(10) < 7;
        let ids = issued.entry((merchant, customer)).or_default();
        let (count, attempt_id) = match rng.below(20) {
            0..=2 => (2 + rng.below(3) as u32, None),
            3..=6 => (1, None),
            7..=13 => {
                next_id += 1;
                ids.push(format!("pay-{next_id}"));
                (1, ids.last().cloned())
            }
            _ if ids.is_empty() => (1, None),
            _ => {
                let recent = ids.len().min(12) as u64;
                let pick = ids.len() - 1 - rng.below(recent) as usize;
                (1, Some(ids[pick].clone()))
            }
        };
        let at = if !shape.times {
            At::Absent
        } else if index > 0 && rng.below(4) == 0 {
            now += 1_000;
            At::Absent
        } else {
            now += if rng.below(100) == 0 {
                61_000 + rng.below(120_000) as i64
            } else {
                rng.below(6_000) as i64 / 250 * 250
            };
            match rng.below(5) {
                0 | 1 => At::Unix(now),
                2 => At::Rfc3339 {
                    ms: now,
                    offset_minutes: 0,
                },
                3 => At::Rfc3339 {
                    ms: now,
                    offset_minutes: 60,
                },
                _ => At::Rfc3339 {
                    ms: now,
                    offset_minutes: -330,
                },
            }
        };
        let upper = rng.below(4) == 0;
        let spell = |word: &str| {
            if upper {
                word.to_uppercase()
            } else {
                word.to_owned()
            }
        };
        rows.push(HistoryRow {
            merchant: format!("m{merchant}"),
            customer: format!("cus_{customer}"),
            method: spell(method),
            method_type: spell(method_type),
            connector: connector.to_owned(),
            success,
            count,
            attempt_id,
            at,
        });
    }
    rows
}

/// A Redis URL where nothing listens: replay must not need Redis.
pub(crate) fn no_redis_url() -> String {
    format!("redis://127.0.0.1:{}", free_port())
}

/// Runs `sticky-routing replay ARGS` with the settings `vars` (Redis at a
/// port where nothing listens unless `vars` names another), `stdin` piped
/// in when given.
pub(crate) async fn replay(args: &[&str], vars: &[(&str, &str)], stdin: Option<&[u8]>) -> Ran {
    let mut all = vec![("STICKY_ROUTING_REDIS_URL", no_redis_url())];
    all.extend(vars.iter().map(|(k, v)| (*k, (*v).to_owned())));
    run_command("replay", &all, args, stdin, Duration::from_secs(60)).await
}

/// The `--json` report: exactly the contract's names, nothing else.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Report {
    pub overall: Figures,
    pub merchants: Vec<Figures>,
}

/// One merchant's figures (or every merchant's), as `--json` prints them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Figures {
    #[serde(default)]
    pub merchant_id: Option<String>,
    pub attempts: u64,
    pub with_pin: u64,
    pub followed: u64,
    pub coverage: f64,
    pub agreement: f64,
    pub sr_followed: f64,
    pub sr_not_followed: f64,
    pub sr_no_pin: f64,
    pub sr_observed: f64,
    pub sr_estimated: f64,
    pub duplicates: u64,
    pub bad_rows: u64,
}

/// The report a `--json` run printed: one JSON object on one line.
pub(crate) fn report_of(ran: &Ran) -> Report {
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one line of JSON:\n{}", ran.stdout);
    let report: Report = serde_json::from_str(lines[0])
        .unwrap_or_else(|e| panic!("{e}: not the report:\n{}", ran.stdout));
    assert!(report.overall.merchant_id.is_none(), "{}", ran.stdout);
    assert!(
        report.merchants.iter().all(|m| m.merchant_id.is_some()),
        "{}",
        ran.stdout
    );
    report
}

/// The counts behind one merchant's figures, kept by a test from what it
/// saw (the service's answers, or its own model).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub attempts: u64,
    pub with_pin: u64,
    pub followed: u64,
    pub successes: u64,
    pub followed_successes: u64,
    pub elsewhere_successes: u64,
    pub no_pin_successes: u64,
    pub duplicates: u64,
    pub bad_rows: u64,
}

impl Tally {
    /// One attempt through `connector`, pinned to `pin`.
    pub fn attempt(&mut self, pin: Option<&str>, connector: &str, success: bool) {
        let success = u64::from(success);
        self.attempts += 1;
        self.successes += success;
        match pin {
            None => self.no_pin_successes += success,
            Some(pin) => {
                self.with_pin += 1;
                if pin == connector {
                    self.followed += 1;
                    self.followed_successes += success;
                } else {
                    self.elsewhere_successes += success;
                }
            }
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Tally) {
        self.attempts += other.attempts;
        self.with_pin += other.with_pin;
        self.followed += other.followed;
        self.successes += other.successes;
        self.followed_successes += other.followed_successes;
        self.elsewhere_successes += other.elsewhere_successes;
        self.no_pin_successes += other.no_pin_successes;
        self.duplicates += other.duplicates;
        self.bad_rows += other.bad_rows;
    }

    /// The figures §5 defines: rates as fractions, 0 where undefined.
    pub fn figures(&self, merchant_id: Option<&str>) -> Figures {
        let rate = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 / whole as f64
            }
        };
        let without_pin = self.attempts - self.with_pin;
        let sr_followed = rate(self.followed_successes, self.followed);
        let sr_no_pin = rate(self.no_pin_successes, without_pin);
        Figures {
            merchant_id: merchant_id.map(str::to_owned),
            attempts: self.attempts,
            with_pin: self.with_pin,
            followed: self.followed,
            coverage: rate(self.with_pin, self.attempts),
            agreement: rate(self.followed, self.with_pin),
            sr_followed,
            sr_not_followed: rate(self.elsewhere_successes, self.with_pin - self.followed),
            sr_no_pin,
            sr_observed: rate(self.successes, self.attempts),
            sr_estimated: if self.attempts == 0 {
                0.0
            } else {
                (sr_followed * self.with_pin as f64 + sr_no_pin * without_pin as f64)
                    / self.attempts as f64
            },
            duplicates: self.duplicates,
            bad_rows: self.bad_rows,
        }
    }
}

/// The report for these tallies: every merchant together, and the `top`
/// merchants by attempts, ties by merchant id bytewise (a `BTreeMap` of
/// `String` iterates bytewise, and the sort is stable).
pub(crate) fn expected_report(
    overall: &Tally,
    merchants: &BTreeMap<String, Tally>,
    top: usize,
) -> Report {
    let mut listed: Vec<(&String, &Tally)> = merchants.iter().collect();
    listed.sort_by_key(|(_, tally)| std::cmp::Reverse(tally.attempts));
    Report {
        overall: overall.figures(None),
        merchants: listed
            .into_iter()
            .take(top)
            .map(|(id, tally)| tally.figures(Some(id)))
            .collect(),
    }
}

/// Integers equal, rates within 1e-12.
pub(crate) fn assert_figures(actual: &Figures, expected: &Figures, context: &str) {
    let counts = |f: &Figures| {
        (
            f.merchant_id.clone(),
            [f.attempts, f.with_pin, f.followed, f.duplicates, f.bad_rows],
        )
    };
    assert_eq!(
        counts(actual),
        counts(expected),
        "{context}: merchant and [attempts, with_pin, followed, duplicates, bad_rows]"
    );
    let rates = |f: &Figures| {
        [
            ("coverage", f.coverage),
            ("agreement", f.agreement),
            ("sr_followed", f.sr_followed),
            ("sr_not_followed", f.sr_not_followed),
            ("sr_no_pin", f.sr_no_pin),
            ("sr_observed", f.sr_observed),
            ("sr_estimated", f.sr_estimated),
        ]
    };
    for ((name, got), (_, want)) in rates(actual).into_iter().zip(rates(expected)) {
        assert!(
            (got - want).abs() <= 1e-12,
            "{context} {:?}: {name} is {got}, expected {want}",
            actual.merchant_id
        );
    }
}

/// The whole report, overall and merchant by merchant, in order.
pub(crate) fn assert_report(actual: &Report, expected: &Report) {
    assert_figures(&actual.overall, &expected.overall, "overall");
    let ids = |r: &Report| -> Vec<Option<String>> {
        r.merchants.iter().map(|m| m.merchant_id.clone()).collect()
    };
    assert_eq!(ids(actual), ids(expected), "the merchants listed, in order");
    for (got, want) in actual.merchants.iter().zip(&expected.merchants) {
        assert_figures(got, want, "merchant");
    }
}

/// The table's row for `name` (`(all)` or a merchant id): its attempts and
/// its seven percentages (coverage, agreement, the three success rates by
/// pin, observed, estimated), as numbers.
pub(crate) fn table_row(stdout: &str, name: &str) -> (u64, Vec<f64>) {
    let line = stdout
        .lines()
        .find(|line| line.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{stdout}"));
    let words: Vec<&str> = line.split_whitespace().filter(|w| *w != "%").collect();
    let percents = words[2..].iter().map(|w| w.parse().unwrap()).collect();
    (words[1].parse().unwrap(), percents)
}

/// Checks the table's row for `name` against `expected` (percentages to
/// the one decimal the table shows).
pub(crate) fn assert_table_row(stdout: &str, name: &str, expected: &Figures) {
    let (attempts, percents) = table_row(stdout, name);
    assert_eq!(attempts, expected.attempts, "{name}'s attempts:\n{stdout}");
    let rates = [
        expected.coverage,
        expected.agreement,
        expected.sr_followed,
        expected.sr_not_followed,
        expected.sr_no_pin,
        expected.sr_observed,
        expected.sr_estimated,
    ];
    assert_eq!(percents.len(), rates.len(), "{stdout}");
    for (shown, rate) in percents.iter().zip(rates) {
        assert!(
            (shown - rate * 100.0).abs() <= 0.05 + 1e-9,
            "{name}: {shown} % shown for {rate}:\n{stdout}"
        );
    }
}

/// The number of customers the table says still had habits at the end.
pub(crate) fn customers_with_habits(stdout: &str) -> usize {
    let words: Vec<&str> = stdout.split_whitespace().collect();
    let at = words
        .windows(3)
        .position(|w| w[1..] == ["customers", "with"][..] && w[0].parse::<usize>().is_ok())
        .unwrap_or_else(|| panic!("no customer count in:\n{stdout}"));
    words[at].parse().unwrap()
}
