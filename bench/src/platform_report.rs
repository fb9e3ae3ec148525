//! The platform study's results ([`crate::platform`]): one row per run, the
//! Redis calls behind them, and issue 41's targets as pass/fail lines.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::compare::Check;
use crate::health_watch::HealthTally;
use crate::report::Report;

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct PlatformRun {
    pub name: String,
    pub merchants: u64,
    pub breaker: bool,
    pub pin_connector: bool,
    pub round: usize,
    /// Calls, latency, codes, and the service's and Redis's CPU per call.
    pub report: Report,
    /// The service's request-path Redis calls per RPC (its `/metrics`).
    pub request_path_per_rpc: f64,
    /// The same calls by command, in all.
    pub request_path: BTreeMap<String, f64>,
    /// The service's background Redis calls per second.
    pub background_per_sec: f64,
    /// The same by command, per second.
    pub background: BTreeMap<String, f64>,
    /// The API's health polls through the warm-up and the run.
    pub health: HealthTally,
    /// Distinct merchants the measured run called.
    pub merchants_called: u64,
}

impl PlatformRun {
    /// `0`, or `590 (UNAVAILABLE 590)`.
    fn errors(&self) -> String {
        let errors = self.report.errors();
        if errors == 0 {
            return "0".into();
        }
        let codes: Vec<String> = self
            .report
            .statuses
            .iter()
            .filter(|(code, _)| code.as_str() != "OK")
            .map(|(code, n)| format!("{code} {n}"))
            .collect();
        format!("{errors} ({})", codes.join(", "))
    }

    /// Breaker on and `pin_connector` sent: what the targets are about.
    fn is_measured(&self) -> bool {
        self.breaker && self.pin_connector
    }

    fn is_target(&self, largest: u64) -> bool {
        self.is_measured() && self.merchants == largest
    }

    /// Neither: a `--platform-split` run (one of the two alone) is
    /// neither a target nor a baseline.
    fn is_baseline(&self, largest: u64) -> bool {
        !self.breaker && !self.pin_connector && self.merchants == largest
    }
}

/// The bounds the targets check against.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Limits {
    /// Background Redis calls per second, at most, at every merchant count.
    pub max_background_rate: f64,
    /// How many times the background rate at the most merchants may be
    /// the one at the fewest (and the other way round).
    pub background_order: f64,
}

/// The whole study.
#[derive(Debug, Clone, Serialize)]
pub struct PlatformStudy {
    pub machine: String,
    pub setup: String,
    pub runs: Vec<PlatformRun>,
    pub limits: Limits,
    pub checks: Vec<Check>,
}

impl PlatformStudy {
    pub fn new(machine: String, setup: String, runs: Vec<PlatformRun>, limits: Limits) -> Self {
        let checks = checks(&runs, limits);
        Self {
            machine,
            setup,
            runs,
            limits,
            checks,
        }
    }

    /// The study as markdown: runs, Redis calls by command, targets.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "## sticky-routing at platform scale (issue 41)\n\n- Machine: {}\n- Setup: {}\n\n",
            self.machine, self.setup
        );
        out.push_str(RUNS_HEADER);
        for run in &self.runs {
            let r = &run.report;
            let micros = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.1}"));
            out.push_str(&format!(
                "| {} | {} | {:.0} | {} | {:.2} | {} | {} | {:.3} | {:.1} | {} | {} |\n",
                run.name,
                run.round,
                r.rps,
                run.errors(),
                r.latency_ms.p99,
                micros(r.cpu_us_per_call),
                micros(r.redis_cpu_us_per_call),
                run.request_path_per_rpc,
                run.background_per_sec,
                run.health.summary(),
                share(run.merchants_called, run.merchants),
            ));
        }
        out.push_str("\n### The service's Redis calls by command (its /metrics)\n\n| run | round | request path, per RPC | background, per second |\n|---|---:|---|---|\n");
        for run in &self.runs {
            let calls = run.report.calls.max(1);
            // Call counts stay far below 2^53.
            #[allow(clippy::cast_precision_loss)]
            let path = listed(&run.request_path, |n| n / calls as f64, 3);
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                run.name,
                run.round,
                path,
                listed(&run.background, |n| n, 1)
            ));
        }
        out.push_str(&Check::markdown_table(&self.checks));
        out
    }
}

const RUNS_HEADER: &str = "| run | round | req/s | errors | p99 ms | service CPU µs/call | Redis CPU µs/call | request-path Redis calls/RPC | background Redis calls/s | API health polls | merchants called |\n|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|\n";

/// `a 1.000, b 0.250`, or `—` when empty.
fn listed(values: &BTreeMap<String, f64>, scale: impl Fn(f64) -> f64, digits: usize) -> String {
    if values.is_empty() {
        return "—".into();
    }
    let parts: Vec<String> = values
        .iter()
        .map(|(k, v)| format!("{k} {:.digits$}", scale(*v)))
        .collect();
    parts.join(", ")
}

/// `78123 of 100000 (78%)`.
fn share(part: u64, whole: u64) -> String {
    // Merchant counts stay far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    let percent = part as f64 * 100.0 / whole.max(1) as f64;
    format!("{part} of {whole} ({percent:.0}%)")
}

/// The median; `None` for no values.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some(f64::midpoint(values[n / 2 - 1], values[n / 2])),
    }
}

/// One figure of a run, read for the targets.
type Field = fn(&PlatformRun) -> Option<f64>;

/// Issue 41's targets, checked at the largest merchant count: the runs
/// with the breaker on against the baseline runs, medians over rounds.
pub fn checks(runs: &[PlatformRun], limits: Limits) -> Vec<Check> {
    let Some(largest) = runs.iter().map(|r| r.merchants).max() else {
        return Vec::new();
    };
    let on: Vec<&PlatformRun> = runs.iter().filter(|r| r.is_target(largest)).collect();
    let base: Vec<&PlatformRun> = runs.iter().filter(|r| r.is_baseline(largest)).collect();
    let at = format!("at {largest} merchants");
    let mut checks = Vec::new();

    let errors: u64 = on.iter().map(|r| r.report.errors()).sum();
    checks.push(Check {
        target: format!("errors {at}, breaker on (all rounds)"),
        measured: errors.to_string(),
        goal: "0".into(),
        met: !on.is_empty() && errors == 0,
    });
    let mut health = HealthTally::default();
    for r in &on {
        health.serving += r.health.serving;
        health.not_serving += r.health.not_serving;
        health.failed += r.health.failed;
    }
    checks.push(Check {
        target: format!("`sticky_routing.v1.StickyRouting` SERVING throughout {at}"),
        measured: health.summary(),
        goal: "every poll SERVING".into(),
        met: health.serving_throughout(),
    });

    let of = |runs: &[&PlatformRun], f: Field| median(runs.iter().filter_map(|r| f(r)).collect());
    let ratios: [(&str, Field, f64); 2] = [
        ("service CPU", |r| r.report.cpu_us_per_call, 0.05),
        ("Redis CPU", |r| r.report.redis_cpu_us_per_call, 0.10),
    ];
    for (what, field, allowed) in ratios {
        let (target, baseline) = (of(&on, field), of(&base, field));
        let (measured, met) = match (target, baseline) {
            (Some(t), Some(b)) if b > 0.0 => (
                format!(
                    "{:+.1}% ({t:.1} against {b:.1} µs, medians)",
                    (t / b - 1.0) * 100.0
                ),
                t <= b * (1.0 + allowed),
            ),
            _ => ("—".to_owned(), false),
        };
        checks.push(Check {
            target: format!("{what} per RecordOutcome {at}, over the baseline"),
            measured,
            goal: format!("≤ +{:.0}%", allowed * 100.0),
            met,
        });
    }
    let p99 = |r: &PlatformRun| Some(r.report.latency_ms.p99);
    let (measured, met) = match (of(&on, p99), of(&base, p99)) {
        (Some(t), Some(b)) => (
            format!("{:+.2} ms ({t:.2} against {b:.2}, medians)", t - b),
            t - b <= 1.0,
        ),
        _ => ("—".to_owned(), false),
    };
    checks.push(Check {
        target: format!("p99 {at}, over the baseline"),
        measured,
        goal: "≤ +1 ms".into(),
        met,
    });

    // The background rate at each count with the breaker on: the worst
    // round's against the bound, the medians against each other.
    let mut counts: Vec<u64> = runs
        .iter()
        .filter(|r| r.is_measured())
        .map(|r| r.merchants)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    let mut medians = Vec::new();
    for &merchants in &counts {
        let rates: Vec<f64> = runs
            .iter()
            .filter(|r| r.is_measured() && r.merchants == merchants)
            .map(|r| r.background_per_sec)
            .collect();
        let worst = rates.iter().copied().fold(0.0, f64::max);
        checks.push(Check {
            target: format!(
                "background Redis calls per second at {merchants} merchants (worst round)"
            ),
            measured: format!("{worst:.1}/s"),
            goal: format!("≤ {:.0}/s", limits.max_background_rate),
            met: worst <= limits.max_background_rate,
        });
        medians.push((merchants, median(rates).unwrap_or(0.0)));
    }
    if let (Some(&(few, low)), Some(&(many, high))) = (medians.first(), medians.last())
        && few != many
    {
        let ratio = high.max(1.0) / low.max(1.0);
        let ratio = ratio.max(1.0 / ratio);
        checks.push(Check {
            target: format!("background rate of the same order at {few} and {many} merchants"),
            measured: format!("{ratio:.1}× ({low:.1}/s against {high:.1}/s)"),
            goal: format!("≤ {:.0}×", limits.background_order),
            met: ratio <= limits.background_order,
        });
    }
    checks
}

#[cfg(test)]
mod tests;
