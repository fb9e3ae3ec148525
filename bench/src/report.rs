//! A run's result as ghz prints it (text), as a machine reads it (JSON),
//! and as one row of the comparison's markdown table.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::run::RunResult;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub mean: f64,
    pub max: f64,
}

/// One run, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub name: String,
    pub calls: u64,
    pub seconds: f64,
    pub rps: f64,
    pub latency_ms: Latency,
    pub statuses: BTreeMap<String, u64>,
    /// Open loop: calls sent over 1 ms behind schedule.
    pub late: u64,
    /// CPU (user + system, `/proc`) the server under test used per call:
    /// the service or the no-op floor; `None` for the storage floor, which
    /// runs inside the generator.
    pub cpu_us_per_call: Option<f64>,
    /// CPU Redis used per call over the same run.
    pub redis_cpu_us_per_call: Option<f64>,
}

impl Report {
    pub fn new(name: impl Into<String>, result: &RunResult) -> Self {
        let h = &result.latency;
        // Microseconds to milliseconds; histogram values stay far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        let ms = |micros: u64| micros as f64 / 1000.0;
        Self {
            name: name.into(),
            calls: result.calls(),
            seconds: result.elapsed.as_secs_f64(),
            rps: result.rate(),
            latency_ms: Latency {
                p50: ms(h.value_at_quantile(0.50)),
                p90: ms(h.value_at_quantile(0.90)),
                p99: ms(h.value_at_quantile(0.99)),
                p999: ms(h.value_at_quantile(0.999)),
                mean: h.mean() / 1000.0,
                max: ms(h.max()),
            },
            statuses: result.statuses.clone(),
            late: result.late,
            cpu_us_per_call: None,
            redis_cpu_us_per_call: None,
        }
    }

    /// The same report with the CPU per call of the server and of Redis.
    #[must_use]
    pub fn with_cpu(self, server: Option<f64>, redis: Option<f64>) -> Self {
        Self {
            cpu_us_per_call: server,
            redis_cpu_us_per_call: redis,
            ..self
        }
    }

    /// Calls that did not end OK.
    pub fn errors(&self) -> u64 {
        self.statuses
            .iter()
            .filter(|(code, _)| code.as_str() != "OK")
            .map(|(_, n)| n)
            .sum()
    }

    /// A ghz-style summary.
    pub fn text(&self) -> String {
        let l = &self.latency_ms;
        let mut out = format!(
            "Summary: {}\n  Count:        {}\n  Total:        {:.2} s\n  Requests/sec: {:.0}\n\n\
             Latency distribution:\n  50 % in {:.3} ms\n  90 % in {:.3} ms\n  99 % in {:.3} ms\n  \
             99.9 % in {:.3} ms\n  mean {:.3} ms, max {:.3} ms\n\nStatus code distribution:\n",
            self.name,
            self.calls,
            self.seconds,
            self.rps,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.mean,
            l.max
        );
        for (code, n) in &self.statuses {
            out.push_str(&format!("  [{code}]   {n} responses\n"));
        }
        if self.late > 0 {
            out.push_str(&format!(
                "\n{} calls went out over 1 ms behind schedule\n",
                self.late
            ));
        }
        out
    }

    /// A markdown table row: name, req/s, CPU µs per call of the server
    /// and of Redis, ratio, p50, p90, p99, p99.9, errors.
    pub fn markdown_row(&self, ratio: &str) -> String {
        let l = &self.latency_ms;
        let micros = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.1}"));
        format!(
            "| {} | {:.0} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            self.name,
            self.rps,
            micros(self.cpu_us_per_call),
            micros(self.redis_cpu_us_per_call),
            ratio,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            self.errors()
        )
    }
}

/// The header that goes with [`Report::markdown_row`].
pub const MARKDOWN_HEADER: &str = "| run | req/s | server CPU µs/call | Redis CPU µs/call | ratio | p50 ms | p90 ms | p99 ms | p99.9 ms | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn result() -> RunResult {
        let mut latency = hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3).unwrap();
        for micros in 1..=1000 {
            latency.record(micros).unwrap();
        }
        let statuses = [("OK".to_owned(), 990), ("UNAVAILABLE".to_owned(), 10)].into();
        RunResult {
            latency,
            latency_by_status: std::collections::BTreeMap::new(),
            statuses,
            elapsed: Duration::from_secs(2),
            late: 0,
        }
    }

    #[test]
    fn percentiles_and_rate_come_from_the_histogram() {
        let report = Report::new("x", &result());
        assert_eq!(report.calls, 1000);
        assert!((report.rps - 500.0).abs() < 1e-9);
        assert!((report.latency_ms.p50 - 0.5).abs() < 0.01);
        assert!((report.latency_ms.p99 - 0.99).abs() < 0.01);
        assert_eq!(report.errors(), 10);
    }

    #[test]
    fn text_and_json_carry_the_status_counts() {
        let report = Report::new("x", &result());
        assert!(report.text().contains("[UNAVAILABLE]   10 responses"));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["statuses"]["OK"], 990);
        assert!(
            report
                .markdown_row("1.00")
                .starts_with("| x | 500 | — | — | 1.00 |")
        );
        let measured = report.with_cpu(Some(12.34), Some(4.56));
        assert!(
            measured
                .markdown_row("1.00")
                .starts_with("| x | 500 | 12.3 | 4.6 | 1.00 |"),
            "{}",
            measured.markdown_row("1.00")
        );
    }
}
