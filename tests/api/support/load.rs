//! A load generator for the failover tests: workers drive a mix of
//! RecordOutcome successes and GetPin calls over many customers (so every
//! Cluster shard gets traffic), and count, per customer, the increments the
//! service acknowledged. Comparing those with Redis afterwards tells how many
//! acknowledged increments a failover lost.
//!
//! Each call carries a 1 s `grpc-timeout` that only the server enforces, so
//! every failure is the server's own answer, kept with its code for the
//! caller to judge; a call the server leaves unanswered fails the test.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sticky_routing::transport::pb;
use tokio::sync::watch;
use tonic::{Code, Response, Status};

use crate::support::{APPLIED, DeadlineBlindApi, TestApp, outcome, pin_request, with_deadline};

/// The deadline each call sends.
const CALL_DEADLINE: Duration = Duration::from_secs(1);
/// How long past its deadline a call may go unanswered before the test
/// calls it hung: the server must answer by the deadline.
const HUNG_AFTER: Duration = Duration::from_secs(2);

/// One failed call: when it ended, which RPC, the server's code, and the
/// customer it was for (so a Cluster test can tell its shard).
#[derive(Debug, Clone, Copy)]
pub struct Failure {
    pub at: Instant,
    pub rpc: &'static str,
    pub code: Code,
    pub customer: usize,
}

/// One successful call: when it ended, how long it took, and its customer.
#[derive(Debug, Clone, Copy)]
pub struct Success {
    pub at: Instant,
    pub took: Duration,
    pub customer: usize,
}

/// What the workers saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub ok: u64,
    pub failures: Vec<Failure>,
    /// When each successful call ended.
    pub successes_at: Vec<Instant>,
    /// Each successful call, with its latency and customer.
    pub successes: Vec<Success>,
    /// Customer index → increments the service acknowledged (APPLIED).
    pub acked: HashMap<usize, i64>,
    /// Customer index → successes whose outcome is unknown (failed calls:
    /// the write may or may not have happened).
    pub unknown: HashMap<usize, i64>,
}

impl LoadReport {
    /// Counts a call for `customer` that failed just now.
    fn failed(&mut self, rpc: &'static str, status: &Status, customer: usize) {
        self.failures.push(Failure {
            at: Instant::now(),
            rpc,
            code: status.code(),
            customer,
        });
    }

    /// Counts a call for `customer`, sent at `sent`, that succeeded just now.
    fn succeeded(&mut self, sent: Instant, customer: usize) {
        let at = Instant::now();
        self.ok += 1;
        self.successes_at.push(at);
        self.successes.push(Success {
            at,
            took: at - sent,
            customer,
        });
    }

    fn merge(&mut self, other: Self) {
        self.ok += other.ok;
        self.failures.extend(other.failures);
        self.successes_at.extend(other.successes_at);
        self.successes.extend(other.successes);
        for (customer, n) in other.acked {
            *self.acked.entry(customer).or_default() += n;
        }
        for (customer, n) in other.unknown {
            *self.unknown.entry(customer).or_default() += n;
        }
    }
}

pub fn customer(i: usize) -> String {
    format!("cust-{i}")
}

/// Gives each of `customers` its first success, so that the load only
/// increments existing hashes (admission stays out of the picture).
pub async fn seed(app: &TestApp, customers: usize) -> LoadReport {
    let mut report = LoadReport::default();
    for i in 0..customers {
        let reply = app.success(&customer(i), "GIGADAT").await;
        assert_eq!(reply.result, APPLIED);
        *report.acked.entry(i).or_default() += 1;
    }
    report
}

/// Runs `workers` workers over `customers` customers until `stop` turns
/// true. Every other call is a GetPin.
pub async fn drive(
    api: DeadlineBlindApi,
    workers: usize,
    customers: usize,
    stop: watch::Receiver<bool>,
) -> LoadReport {
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let api = api.clone();
            let stop = stop.clone();
            tokio::spawn(worker(api, w, workers, customers, stop))
        })
        .collect();
    let mut report = LoadReport::default();
    for task in tasks {
        report.merge(task.await.unwrap());
    }
    report
}

async fn worker(
    mut api: DeadlineBlindApi,
    index: usize,
    workers: usize,
    customers: usize,
    stop: watch::Receiver<bool>,
) -> LoadReport {
    let mut report = LoadReport::default();
    let mut next = index;
    while !*stop.borrow() {
        let i = next % customers;
        next += workers;
        let write = with_deadline(
            outcome("m1", &customer(i), "GIGADAT", pb::Outcome::Success),
            CALL_DEADLINE,
        );
        let sent = Instant::now();
        match answered("RecordOutcome", api.record_outcome(write)).await {
            Ok(reply) if reply.get_ref().result == APPLIED => {
                report.succeeded(sent, i);
                *report.acked.entry(i).or_default() += 1;
            }
            Ok(reply) => panic!("an existing customer's success was {reply:?}"),
            Err(status) => {
                report.failed("RecordOutcome", &status, i);
                *report.unknown.entry(i).or_default() += 1;
            }
        }
        let read = with_deadline(pin_request(&customer(i), &[]), CALL_DEADLINE);
        let sent = Instant::now();
        match answered("GetPin", api.get_pin(read)).await {
            Ok(_) => report.succeeded(sent, i),
            Err(status) => report.failed("GetPin", &status, i),
        }
    }
    report
}

/// The server's answer to `call`; panics if it never comes.
async fn answered<T>(
    rpc: &str,
    call: impl Future<Output = Result<Response<T>, Status>>,
) -> Result<Response<T>, Status> {
    tokio::time::timeout(CALL_DEADLINE + HUNG_AFTER, call)
        .await
        .unwrap_or_else(|_| panic!("{rpc} was not answered by its {CALL_DEADLINE:?} deadline"))
}
