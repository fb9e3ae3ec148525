//! A load generator for the failover tests: workers drive a mix of
//! RecordOutcome successes and GetPin calls over many customers (so every
//! Cluster shard gets traffic), and count, per customer, the increments the
//! service acknowledged. Comparing those with Redis afterwards tells how many
//! acknowledged increments a failover lost.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::helpers::{APPLIED, TestApp, outcome, pin_request};

/// What the workers saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub ok: u64,
    pub failed: u64,
    /// When each failed call ended.
    pub failures_at: Vec<Instant>,
    /// When each successful call ended.
    pub successes_at: Vec<Instant>,
    /// Customer index → increments the service acknowledged (APPLIED).
    pub acked: HashMap<usize, i64>,
    /// Customer index → successes whose outcome is unknown (failed calls:
    /// the write may or may not have happened).
    pub unknown: HashMap<usize, i64>,
}

impl LoadReport {
    fn merge(&mut self, other: Self) {
        self.ok += other.ok;
        self.failed += other.failed;
        self.failures_at.extend(other.failures_at);
        self.successes_at.extend(other.successes_at);
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
    api: StickyRoutingClient<Channel>,
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
    mut api: StickyRoutingClient<Channel>,
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
        let mut write =
            tonic::Request::new(outcome("m1", &customer(i), "GIGADAT", pb::Outcome::Success));
        write.set_timeout(Duration::from_secs(1));
        match api.record_outcome(write).await {
            Ok(reply) if reply.get_ref().result == APPLIED => {
                report.ok += 1;
                report.successes_at.push(Instant::now());
                *report.acked.entry(i).or_default() += 1;
            }
            Ok(reply) => panic!("an existing customer's success was {reply:?}"),
            Err(_) => {
                report.failed += 1;
                report.failures_at.push(Instant::now());
                *report.unknown.entry(i).or_default() += 1;
            }
        }
        let mut read = tonic::Request::new(pin_request(&customer(i), &[]));
        read.set_timeout(Duration::from_secs(1));
        match api.get_pin(read).await {
            Ok(_) => {
                report.ok += 1;
                report.successes_at.push(Instant::now());
            }
            Err(_) => {
                report.failed += 1;
                report.failures_at.push(Instant::now());
            }
        }
    }
    report
}
