//! Drives a target with `concurrency` workers, closed-loop (each worker
//! sends its next call when the last returns, as ghz does by default) or
//! open-loop at a fixed rate, and keeps one latency histogram.
//!
//! Latency runs from the moment a call goes out, as ghz measures it. In open
//! loop a worker that falls behind its schedule sends at once; such late
//! sends are counted (`late`), so a stall that thins the load shows up
//! instead of hiding (coordinated omission). Measuring from the due time
//! instead would charge tokio's 1 ms timer granularity to the server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tonic::Code;

use crate::BoxError;
use crate::target::Target;
use crate::workload::Generator;

/// When a run ends.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// After this many calls in all (ghz `-n`).
    Count(u64),
    /// After this long (ghz `-z`).
    After(Duration),
}

/// How to drive the target.
#[derive(Debug, Clone, Copy)]
pub struct RunSpec {
    pub concurrency: usize,
    pub stop: Stop,
    /// Calls per second in all (ghz `--rps`); `None` is closed loop.
    pub rate: Option<f64>,
    pub seed: u64,
}

/// What a run saw.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Latency in microseconds.
    pub latency: Histogram<u64>,
    pub statuses: BTreeMap<String, u64>,
    /// Latency per status code, for the codes seen: an overloaded server's
    /// fast refusals and its slower successes are told apart.
    pub latency_by_status: BTreeMap<String, Histogram<u64>>,
    pub elapsed: Duration,
    /// Open loop: calls that went out more than [`LATE`] after they were due.
    pub late: u64,
}

/// How far behind schedule a send may start before it counts as late.
pub const LATE: Duration = Duration::from_millis(1);

impl RunResult {
    pub fn calls(&self) -> u64 {
        self.latency.len()
    }

    pub fn ok(&self) -> u64 {
        self.statuses.get("OK").copied().unwrap_or(0)
    }

    /// Calls per second that ended with `status` (`OK`: the goodput).
    pub fn rate_of(&self, status: &str) -> f64 {
        // Call counts stay far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        let calls = self.statuses.get(status).copied().unwrap_or(0) as f64;
        calls / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `quantile` latency of the calls that ended with `status`, in
    /// milliseconds; `None` when there were none.
    pub fn latency_ms_of(&self, status: &str, quantile: f64) -> Option<f64> {
        let histogram = self.latency_by_status.get(status)?;
        // Microseconds stay far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        let micros = histogram.value_at_quantile(quantile) as f64;
        (!histogram.is_empty()).then_some(micros / 1000.0)
    }

    pub fn rate(&self) -> f64 {
        // Call counts stay far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        let calls = self.calls() as f64;
        calls / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `generator`'s calls against `target`.
pub async fn run(
    target: &Target,
    generator: Arc<Generator>,
    spec: RunSpec,
) -> Result<RunResult, BoxError> {
    let started = Instant::now();
    let sent = Arc::new(AtomicU64::new(0));
    let workers = spec.concurrency.max(1);
    let mut tasks = Vec::with_capacity(workers);
    for index in 0..workers {
        let mut worker = target.for_worker(index);
        let generator = Arc::clone(&generator);
        let sent = Arc::clone(&sent);
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(spec.seed.wrapping_add(index as u64));
            let mut latency = new_histogram();
            let mut statuses = [0u64; 17];
            let mut by_status = PerStatus::default();
            let mut k: u64 = 0;
            let mut late: u64 = 0;
            loop {
                let due = match spec.rate {
                    None => Instant::now(),
                    Some(rate) => {
                        // Worker w's k-th call is the (k·workers + w)-th overall.
                        #[allow(clippy::cast_precision_loss)]
                        let nth = (k * workers as u64 + index as u64) as f64;
                        let due = started + Duration::from_secs_f64(nth / rate);
                        if Instant::now() > due + LATE {
                            late += 1;
                        }
                        tokio::time::sleep_until(due.into()).await;
                        due
                    }
                };
                let more = match spec.stop {
                    Stop::Count(n) => sent.fetch_add(1, Ordering::Relaxed) < n,
                    Stop::After(length) => due.duration_since(started) < length,
                };
                if !more {
                    break;
                }
                let call = generator.next(&mut rng);
                let sent = Instant::now();
                let code = worker.send(call).await;
                let took = sent.elapsed();
                record(&mut latency, took);
                record(by_status.of(code), took);
                statuses[code as usize] += 1;
                k += 1;
            }
            (latency, statuses, late, by_status)
        }));
    }
    merge(tasks, started).await
}

/// Open loop without workers: `dispatchers` tasks each send their share of
/// `rate` on schedule and put every call in a task of its own, so a slow
/// answer never delays the next send and nothing bounds the calls in
/// flight, as with many independent clients. (In [`run`]'s open loop a
/// worker whose call is slow sends its next one late; at several times a
/// server's capacity that thins the load it is meant to measure.)
///
/// A dispatcher sleeps only until its next call is due and then sends
/// every call due by then, so tokio's 1 ms timer makes bursts of at most
/// a millisecond's calls, not a slower rate. `late` counts the calls sent
/// more than [`LATE`] behind schedule: the generator falling behind.
pub async fn run_unbounded(
    target: &Target,
    generator: Arc<Generator>,
    dispatchers: usize,
    rate: f64,
    length: Duration,
    seed: u64,
) -> Result<RunResult, BoxError> {
    let started = Instant::now();
    let dispatchers = dispatchers.max(1);
    let mut tasks = Vec::with_capacity(dispatchers);
    for index in 0..dispatchers {
        let worker = target.for_worker(index);
        let generator = Arc::clone(&generator);
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed.wrapping_add(index as u64));
            let mut tally = Tally::default();
            let mut calls = tokio::task::JoinSet::new();
            for k in 0u64.. {
                // Dispatcher d's k-th call is the (k·dispatchers + d)-th overall.
                #[allow(clippy::cast_precision_loss)]
                let nth = (k * dispatchers as u64 + index as u64) as f64;
                let due = started + Duration::from_secs_f64(nth / rate);
                if due.duration_since(started) >= length {
                    break;
                }
                let now = Instant::now();
                if due > now {
                    tokio::time::sleep_until(due.into()).await;
                } else if now > due + LATE {
                    tally.late += 1;
                }
                let call = generator.next(&mut rng);
                let mut worker = worker.clone();
                calls.spawn(async move {
                    let sent = Instant::now();
                    let code = worker.send(call).await;
                    (code, sent.elapsed())
                });
                while let Some(done) = calls.try_join_next() {
                    tally.add(done);
                }
            }
            while let Some(done) = calls.join_next().await {
                tally.add(done);
            }
            (tally.latency, tally.statuses, tally.late, tally.by_status)
        }));
    }
    let mut result = merge(tasks, started).await?;
    // Rates over the sending window: the last answers may come up to a
    // deadline later, and they were offered within it.
    result.elapsed = length;
    Ok(result)
}

/// What one dispatcher saw.
struct Tally {
    latency: Histogram<u64>,
    statuses: [u64; 17],
    late: u64,
    by_status: PerStatus,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            latency: new_histogram(),
            statuses: [0; 17],
            late: 0,
            by_status: PerStatus::default(),
        }
    }
}

impl Tally {
    fn add(&mut self, done: Result<(Code, Duration), tokio::task::JoinError>) {
        // A call task cannot panic short of a bug in the client; count it
        // as the client counts a call it could not finish.
        let (code, took) = done.unwrap_or((Code::Cancelled, Duration::ZERO));
        record(&mut self.latency, took);
        record(self.by_status.of(code), took);
        self.statuses[code as usize] += 1;
    }
}

/// Records one success for every (customer, combo), `concurrency` at a
/// time, so that a measured run meets existing customers only.
pub async fn fill(
    target: &Target,
    generator: Arc<Generator>,
    concurrency: usize,
) -> Result<RunResult, BoxError> {
    let started = Instant::now();
    let keys = generator.keys().clone();
    let total = keys.customers * keys.combos;
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for index in 0..concurrency.max(1) {
        let mut worker = target.for_worker(index);
        let generator = Arc::clone(&generator);
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            let mut latency = new_histogram();
            let mut codes = [0u64; 17];
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let (customer, combo) = (1 + n / keys.combos, n % keys.combos);
                let call = generator.record_call(customer, combo);
                let sent = Instant::now();
                let code = worker.send(call).await;
                record(&mut latency, sent.elapsed());
                codes[code as usize] += 1;
            }
            (latency, codes, 0, PerStatus::default())
        }));
    }
    merge(tasks, started).await
}

/// What one worker saw: latency, calls per status code, late sends, and
/// latency per status code.
type WorkerResult = (Histogram<u64>, [u64; 17], u64, PerStatus);

/// One latency histogram per gRPC code, made when the code is first seen.
#[derive(Default)]
struct PerStatus([Option<Histogram<u64>>; 17]);

impl PerStatus {
    fn of(&mut self, code: Code) -> &mut Histogram<u64> {
        self.0[code as usize].get_or_insert_with(new_histogram)
    }
    /// The histograms made, by code name.
    fn named(self) -> BTreeMap<String, Histogram<u64>> {
        self.0
            .into_iter()
            .enumerate()
            .filter_map(|(code, histogram)| Some((code_name(code), histogram?)))
            .collect()
    }
}

/// Waits for the workers and adds up what they saw.
async fn merge(
    tasks: Vec<tokio::task::JoinHandle<WorkerResult>>,
    started: Instant,
) -> Result<RunResult, BoxError> {
    let mut latency = new_histogram();
    let mut codes = [0u64; 17];
    let mut late = 0;
    let mut by_status = PerStatus::default();
    for task in tasks {
        let (worker_latency, worker_codes, worker_late, worker_by_status) = task.await?;
        latency.add(&worker_latency)?;
        late += worker_late;
        for (total, n) in codes.iter_mut().zip(worker_codes) {
            *total += n;
        }
        for (code, histogram) in worker_by_status.0.iter().enumerate() {
            if let Some(histogram) = histogram {
                by_status.0[code]
                    .get_or_insert_with(new_histogram)
                    .add(histogram)?;
            }
        }
    }
    Ok(RunResult {
        latency,
        latency_by_status: by_status.named(),
        statuses: status_names(&codes),
        elapsed: started.elapsed(),
        late,
    })
}

/// 1 µs to 60 s at 3 significant digits.
#[allow(clippy::expect_used, reason = "constant bounds, checked by a test")]
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn record(histogram: &mut Histogram<u64>, latency: Duration) {
    let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    histogram.saturating_record(micros.max(1));
}

fn status_names(codes: &[u64; 17]) -> BTreeMap<String, u64> {
    codes
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(code, n)| (code_name(code), *n))
        .collect()
}

/// Code 14 → `UNAVAILABLE`.
fn code_name(code: usize) -> String {
    let name = format!("{:?}", Code::from(i32::try_from(code).unwrap_or(2)));
    screaming(&name)
}

/// `DeadlineExceeded` → `DEADLINE_EXCEEDED`, as gRPC names codes.
fn screaming(name: &str) -> String {
    let mut out = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_bounds_are_valid() {
        let mut h = new_histogram();
        record(&mut h, Duration::from_secs(3600));
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn rates_and_latencies_are_kept_per_status() {
        let mut per_status = PerStatus::default();
        for micros in [100, 200, 300] {
            record(
                per_status.of(Code::ResourceExhausted),
                Duration::from_micros(micros),
            );
        }
        record(per_status.of(Code::Ok), Duration::from_millis(5));
        let mut codes = [0u64; 17];
        codes[Code::Ok as usize] = 1;
        codes[Code::ResourceExhausted as usize] = 3;
        let result = RunResult {
            latency: new_histogram(),
            latency_by_status: per_status.named(),
            statuses: status_names(&codes),
            elapsed: Duration::from_secs(2),
            late: 0,
        };
        assert!((result.rate_of("RESOURCE_EXHAUSTED") - 1.5).abs() < 1e-9);
        let median = result.latency_ms_of("RESOURCE_EXHAUSTED", 0.5).unwrap();
        assert!((median - 0.2).abs() < 0.001, "{median}");
        assert!((result.latency_ms_of("OK", 0.99).unwrap() - 5.0).abs() < 0.01);
        assert_eq!(result.latency_ms_of("UNAVAILABLE", 0.5), None);
    }

    #[test]
    fn codes_are_named_as_grpc_names_them() {
        let mut codes = [0u64; 17];
        codes[0] = 5;
        codes[4] = 2;
        let names = status_names(&codes);
        assert_eq!(names.get("OK"), Some(&5));
        assert_eq!(names.get("DEADLINE_EXCEEDED"), Some(&2));
        assert_eq!(names.len(), 2);
    }
}
