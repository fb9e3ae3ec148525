//! Failover under load, with no restart of the service: a Cluster primary
//! killed outright, and a Sentinel-driven `SENTINEL FAILOVER`. Each test
//! proves recovery within 5 s of the promotion and measures the calls that
//! failed and the acknowledged increments that Redis's asynchronous
//! replication lost (behind Sentinel: none, which the test demands). The
//! figures are printed (`-- --nocapture`) and quoted in docs/operations.md.
//!
//! A call may fail only during the failover, and only as a Redis outage
//! answers: UNAVAILABLE or DEADLINE_EXCEEDED, and UNKNOWN for a
//! RecordOutcome whose write may have been applied. INTERNAL, or a failure
//! on a healthy Redis, is a bug the test must catch.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use fred::prelude::HashesInterface;
use fred::util::redis_keyslot;
use sticky_routing::transport::pb;
use tokio::sync::watch;
use tonic::Code;

use crate::support::load::{self, Failure, LoadReport};
use crate::support::*;
use test_support::redis_cluster::{owned_slots, role};
use test_support::redis_server::redis_cli;
use test_support::wait::wait_for;

const CUSTOMERS: usize = 300;
const WORKERS: usize = 8;
/// The contract: the service serves again within this of the promotion.
const RECOVERY: Duration = Duration::from_secs(5);
/// How often promotion and traffic are polled: the figures' resolution.
const POLL: Duration = Duration::from_millis(20);
/// The scripts a call may run: each worker meets NOSCRIPT at most once per
/// script on the promoted replica, since its fallback EVAL caches it again.
const SCRIPTS: u64 = 3;

/// The codes `rpc` may answer while Redis fails over.
fn allowed_during_failover(rpc: &str) -> &'static [Code] {
    match rpc {
        "RecordOutcome" => &[Code::Unavailable, Code::DeadlineExceeded, Code::Unknown],
        _ => &[Code::Unavailable, Code::DeadlineExceeded],
    }
}

/// Settings as in production, but a 500 ms Redis timeout so a loaded test
/// machine does not fail calls outside the failover.
async fn app_on(topology: Topology) -> TestApp {
    spawn_app_on(topology, |s| {
        s.redis.command_timeout = Duration::from_millis(500);
    })
    .await
}

async fn sentinel_failover(app: &mut TestApp) -> (Instant, u16) {
    let sentinel = app.redis.sentinel();
    let heirs = sentinel.replicas.iter().map(|r| r.port).collect();
    sentinel.failover();
    promoted(heirs, Duration::from_secs(20)).await
}

/// Polls `candidates` until one is a primary; returns when that was seen,
/// and which.
async fn promoted(candidates: Vec<u16>, within: Duration) -> (Instant, u16) {
    tokio::task::spawn_blocking(move || {
        let what = format!("none of {candidates:?} was promoted");
        let port = wait_for(within, POLL, &what, || {
            candidates
                .iter()
                .copied()
                .find(|port| role(*port) == "master")
        });
        (Instant::now(), port)
    })
    .await
    .unwrap()
}

/// What a failover under load did, for the test to judge further.
struct FailoverRun {
    report: LoadReport,
    /// Both health statuses, polled every [`POLL`] while the load ran.
    health: Vec<HealthSample>,
    /// When the failover was triggered.
    started: Instant,
    /// When the replica was seen promoted.
    promoted_at: Instant,
    /// Acknowledged increments that Redis no longer holds.
    lost: i64,
}

/// Starts the load, runs `failover` one second in, keeps the load going
/// until `RECOVERY` plus 3 s after the promotion it returns (with the port
/// of the promoted replica), then checks and reports.
async fn under_load(
    app: &mut TestApp,
    name: &str,
    failover: impl AsyncFnOnce(&mut TestApp) -> (Instant, u16),
) -> FailoverRun {
    let seeded = load::seed(app, CUSTOMERS).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let api = deadline_blind_api(app.addr);
    let watching = tokio::spawn(watch_health(app.health.clone(), stop_rx.clone()));
    let running = tokio::spawn(load::drive(api, WORKERS, CUSTOMERS, stop_rx));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let (promoted_at, heir) = failover(app).await;
    let switched_at = first_service_traffic(heir, promoted_at + Duration::from_secs(15)).await;
    tokio::time::sleep_until((promoted_at + RECOVERY + Duration::from_secs(3)).into()).await;
    stop_tx.send(true).unwrap();
    let report = running.await.unwrap();
    let health = watching.await.unwrap();

    let last_failure = report.failures.iter().map(|f| f.at).max();
    let late_successes = report
        .successes_at
        .iter()
        .filter(|t| **t > promoted_at + RECOVERY)
        .count();
    // The new primary is the truth: behind Sentinel, the old one still
    // holds what it acknowledged after the promotion, until it is demoted.
    let truth = match app.redis {
        TestRedis::Sentinel(_) => app.node(heir).await,
        _ => app.inspect.clone(),
    };
    let (acked, lost, extra) = reconcile(&truth, &seeded, &report).await;
    // A promoted replica never saw SCRIPT LOAD (Redis does not replicate
    // it): the service met NOSCRIPT there and reloaded by EVAL.
    let noscript = noscript_replies(heir);
    let fallback_evals = eval_calls(heir);
    println!(
        "FAILOVER {name}: calls={} failed={} promotion_after={:?} service_on_new_primary_after_promotion={:?} \
         last_failure_after_promotion={:?} acked_increments={acked} lost_acked={lost} \
         unacked_applied={extra} noscript_on_new_primary={noscript} evals_on_new_primary={fallback_evals}",
        report.ok + report.failures.len() as u64,
        report.failures.len(),
        promoted_at - started,
        switched_at.saturating_duration_since(promoted_at),
        last_failure.map(|t| t.saturating_duration_since(promoted_at)),
    );
    assert!(
        (1..=SCRIPTS * WORKERS as u64).contains(&noscript) && fallback_evals > 0,
        "{name}: the new primary answered NOSCRIPT {noscript} times and ran {fallback_evals} \
         EVALs; the fallback EVAL must run and cache each script again (at most one NOSCRIPT \
         per worker and script)"
    );
    for failure in &report.failures {
        assert_allowed(name, failure, started);
    }
    assert!(
        switched_at <= promoted_at + RECOVERY,
        "{name}: the service reached the new primary {:?} after its promotion",
        switched_at - promoted_at
    );
    if let Some(last) = last_failure {
        assert!(
            last <= promoted_at + RECOVERY,
            "{name}: a call failed {:?} after the promotion",
            last - promoted_at
        );
    }
    assert!(
        late_successes > 100,
        "{name}: the service did not serve after recovering"
    );
    app.assert_every_key_has_a_ttl().await;
    // Kubernetes readiness follows "": a shard's failover must never take
    // the pods out of rotation.
    let flipped: Vec<_> = health.iter().filter(|s| s.process != SERVING).collect();
    assert!(
        flipped.is_empty(),
        "{name}: health \"\" left SERVING during the failover: {:?}",
        flipped.first()
    );
    FailoverRun {
        report,
        health,
        started,
        promoted_at,
        lost,
    }
}

/// Both health statuses at one moment.
#[derive(Debug, Clone, Copy)]
struct HealthSample {
    at: Instant,
    /// Service "" (Kubernetes readiness and liveness).
    process: i32,
    /// Service `sticky_routing.v1.StickyRouting` (Redis answers).
    api: i32,
}

/// Polls both health statuses until `stop` turns true.
async fn watch_health(
    health: tonic_health::pb::health_client::HealthClient<tonic::transport::Channel>,
    stop: watch::Receiver<bool>,
) -> Vec<HealthSample> {
    let mut samples = Vec::new();
    while !*stop.borrow() {
        let (process, api) = tokio::join!(health_status(&health, ""), health_status(&health, API));
        samples.push(HealthSample {
            at: Instant::now(),
            process,
            api,
        });
        tokio::time::sleep(POLL).await;
    }
    samples
}

/// Fails the test for a call that failed on a healthy Redis (before the
/// failover began at `started`) or with a code a failover does not explain.
fn assert_allowed(name: &str, failure: &Failure, started: Instant) {
    assert!(
        failure.at >= started,
        "{name}: a call failed {:?} before the failover: {failure:?}",
        started - failure.at
    );
    assert!(
        allowed_during_failover(failure.rpc).contains(&failure.code),
        "{name}: a failover does not explain {failure:?}"
    );
}

/// When the service's first call reached `port` (the promoted replica had
/// none from clients before: replication does not count as calls of these).
async fn first_service_traffic(port: u16, deadline: Instant) -> Instant {
    tokio::task::spawn_blocking(move || {
        let within = deadline.saturating_duration_since(Instant::now());
        let what = format!("the service never reached {port}");
        wait_for(within, POLL, &what, || {
            let stats = redis_cli(port, &["info", "commandstats"]);
            ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_hgetall:"]
                .iter()
                .any(|name| stats.contains(name))
                .then(Instant::now)
        })
    })
    .await
    .unwrap()
}

/// How many NOSCRIPT errors `port` has replied since it started.
fn noscript_replies(port: u16) -> u64 {
    redis_cli(port, &["info", "errorstats"])
        .lines()
        .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
        .map_or(0, |count| count.trim().parse().unwrap())
}

/// How many EVALs `port` has run: the service sends EVAL only after NOSCRIPT.
fn eval_calls(port: u16) -> u64 {
    redis_cli(port, &["info", "commandstats"])
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_eval:calls="))
        .map_or(0, |stats| stats.split(',').next().unwrap().parse().unwrap())
}

/// Compares what the service acknowledged with what Redis kept. Returns
/// (acknowledged, lost acknowledged, applied though unacknowledged).
async fn reconcile(
    truth: &fred::prelude::Client,
    seeded: &LoadReport,
    report: &LoadReport,
) -> (i64, i64, i64) {
    let (mut acked_total, mut lost, mut extra) = (0, 0, 0);
    for i in 0..CUSTOMERS {
        let acked =
            seeded.acked.get(&i).copied().unwrap_or(0) + report.acked.get(&i).copied().unwrap_or(0);
        let unknown = report.unknown.get(&i).copied().unwrap_or(0);
        let key = format!("sticky_gw_m1_{}", load::customer(i));
        let stored: Option<i64> = truth.hget(&key, "INTERAC:RTP:GIGADAT").await.unwrap();
        let stored = stored.unwrap_or(0);
        assert!(
            stored <= acked + unknown,
            "{key}: {stored} stored, but only {acked} acknowledged and {unknown} unknown"
        );
        acked_total += acked;
        lost += (acked - stored).max(0);
        extra += (stored - acked).max(0);
    }
    (acked_total, lost, extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_primary_is_replaced_without_restarting_the_service() {
    let mut app = app_on(Topology::Cluster).await;
    let cluster = app.redis.cluster();
    let victim = cluster.primaries()[0];
    // Which primary owns which slots, before the kill.
    let owners: Vec<(u16, Vec<RangeInclusive<u16>>)> = cluster
        .primaries()
        .into_iter()
        .map(|port| (port, owned_slots(port)))
        .collect();
    let run = under_load(
        &mut app,
        "cluster kill -9 primary",
        async move |app: &mut TestApp| {
            let cluster = app.redis.cluster();
            let heir = cluster.replica_of(victim);
            cluster.node(victim).stop();
            promoted(vec![heir], Duration::from_secs(20)).await
        },
    )
    .await;
    let shard_of = |customer: usize| {
        let slot = redis_keyslot(format!("sticky_gw_m1_{}", load::customer(customer)).as_bytes());
        owners
            .iter()
            .find(|(_, ranges)| ranges.iter().any(|r| r.contains(&slot)))
            .map(|(port, _)| *port)
            .unwrap()
    };
    let mut failed_per_shard: Vec<(u16, usize)> = owners.iter().map(|(p, _)| (*p, 0)).collect();
    let mut healthy_codes = std::collections::BTreeMap::<String, usize>::new();
    for failure in &run.report.failures {
        let shard = shard_of(failure.customer);
        failed_per_shard
            .iter_mut()
            .find(|(p, _)| *p == shard)
            .unwrap()
            .1 += 1;
        if shard != victim {
            *healthy_codes
                .entry(format!("{} {:?}", failure.rpc, failure.code))
                .or_default() += 1;
        }
    }
    // The healthy shards' latency before the kill, and from the kill until
    // a second after the promotion (the whole failover).
    let healthy = |s: &&load::Success| shard_of(s.customer) != victim;
    let before: Vec<Duration> = run
        .report
        .successes
        .iter()
        .filter(healthy)
        .filter(|s| s.at < run.started)
        .map(|s| s.took)
        .collect();
    let during: Vec<Duration> = run
        .report
        .successes
        .iter()
        .filter(healthy)
        .filter(|s| s.at > run.started && s.at < run.promoted_at + Duration::from_secs(1))
        .map(|s| s.took)
        .collect();
    let (before, during) = (Latencies::of(before), Latencies::of(during));
    println!(
        "FAILOVER cluster per shard: victim={victim} failed_per_shard={failed_per_shard:?} \
         healthy_before={before} healthy_during={during} healthy_failures={healthy_codes:?}"
    );
    let healthy_failures: Vec<_> = run
        .report
        .failures
        .iter()
        .filter(|f| shard_of(f.customer) != victim)
        .collect();
    assert!(
        healthy_failures.is_empty(),
        "{} calls for keys on the healthy shards failed during the failover (per shard: \
         {failed_per_shard:?}), first {:?}",
        healthy_failures.len(),
        healthy_failures.first()
    );
    // The API's status names the dead primary until its replica serves.
    let api_off = run
        .health
        .iter()
        .filter(|s| s.at > run.started && s.api != SERVING)
        .count();
    let api_on_at_end = run.health.last().map(|s| s.api);
    println!(
        "FAILOVER cluster health: {API} not serving in {api_off} of {} polls",
        run.health.len()
    );
    assert!(api_off > 0, "{API} stayed SERVING while a primary was dead");
    assert_eq!(
        api_on_at_end,
        Some(SERVING),
        "{API} did not come back after the promotion"
    );
    assert!(
        during.p99 <= usual_bound(before.p99),
        "the healthy shards' p99 rose from {:?} to {:?} during the failover (bound {:?})",
        before.p99,
        during.p99,
        usual_bound(before.p99)
    );
}

/// A latency summary.
struct Latencies {
    count: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Latencies {
    fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let at = |q: f64| {
            samples
                .get(((samples.len() as f64 * q) as usize).min(samples.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        Self {
            count: samples.len(),
            p50: at(0.50),
            p99: at(0.99),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "(n={} p50={:?} p99={:?} max={:?})",
            self.count, self.p50, self.p99, self.max
        )
    }
}

/// The most the healthy shards' p99 may reach during a failover: "usual"
/// latency, allowing for what the failover itself costs a shared 2-core
/// machine that runs six Redis nodes, the service and the load (and, in the
/// whole suite, other tests): three times the p99 before the kill, and never
/// less than 100 ms above it. A client that stalls the healthy shards does
/// so from the kill until the promotion (seconds, as fred's cluster client
/// did) or until the Redis timeout (500 ms here), far above either.
fn usual_bound(before: Duration) -> Duration {
    (before * 3).max(before + Duration::from_millis(100))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed_without_restarting_the_service() {
    let mut app = app_on(Topology::Sentinel).await;
    let lost = under_load(&mut app, "sentinel failover", sentinel_failover)
        .await
        .lost;
    // Writes are fenced from Sentinel's announcement of the promotion until
    // the service reaches the new primary, so the old primary acknowledges
    // nothing that its resync will discard.
    assert_eq!(lost, 0, "acknowledged increments were lost");
    let denials = app.redis.sentinel().acl_denials();
    assert!(
        denials.trim().is_empty(),
        "the sentinel refused the service's user: {denials}"
    );
    // A stopped service leaves no connection to the sentinel behind.
    assert!(app.redis.sentinel().service_clients() > 0);
    app.stop().await.unwrap();
    let sentinel = app.redis.sentinel();
    wait_for(
        Duration::from_secs(5),
        POLL,
        "sentinel connections outlive the service",
        || (sentinel.service_clients() == 0).then_some(()),
    );
}

/// A slot moving to another primary (a resharding) while the service's slot
/// table still names the old one. Once the slot is the new owner's, the old
/// one answers MOVED, which means the command did not run: the service sends
/// it once more to the new owner, and the call succeeds. Half-way through
/// the slot's migration, a key already moved gets ASK, which the service
/// does not follow (it would need ASKING on the same connection just before
/// the command; fred 10.1's cluster client sends ASKING to the new owner but
/// the command again to the old one, until it runs out of redirections): that
/// call answers UNAVAILABLE, and indeed nothing was applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resharded_slot_is_followed_and_a_migrating_key_is_refused_honestly() {
    let mut app = app_on(Topology::Cluster).await;
    let customer = "resharded";
    let key = format!("sticky_gw_m1_{customer}");
    let slot = redis_keyslot(key.as_bytes());
    app.success(customer, "GIGADAT").await;
    let primaries = app.redis.cluster().primaries();
    let source = *primaries
        .iter()
        .find(|port| owned_slots(**port).iter().any(|r| r.contains(&slot)))
        .unwrap();
    let target = *primaries.iter().find(|port| **port != source).unwrap();
    let id = |port: u16| redis_cli(port, &["cluster", "myid"]).trim().to_owned();
    let (source_id, target_id) = (id(source), id(target));
    let slot_text = slot.to_string();
    let ok = |port: u16, args: &[&str]| {
        let reply = redis_cli(port, args);
        assert!(reply.trim() == "OK", "{args:?} on {port}: {reply}");
    };

    // Migrating: the key is already on the target, the slot still the source's.
    ok(
        target,
        &["cluster", "setslot", &slot_text, "importing", &source_id],
    );
    ok(
        source,
        &["cluster", "setslot", &slot_text, "migrating", &target_id],
    );
    let target_port = target.to_string();
    ok(
        source,
        &[
            "migrate",
            "127.0.0.1",
            &target_port,
            "",
            "0",
            "5000",
            "keys",
            &key,
        ],
    );
    let asked_before = error_count(source, "ASK");
    let asked = app
        .record(outcome("m1", customer, "GIGADAT", pb::Outcome::Success))
        .await
        .expect_err("a write for a migrating key succeeded without ASKING");
    assert_eq!(asked.code(), Code::Unavailable, "{asked:?}");
    assert!(
        error_count(source, "ASK") > asked_before,
        "the old owner answered no ASK: the test did not exercise it"
    );

    // Moved: the slot is the target's; the service's table does not know yet
    // (the refresh that the ASK asked for has come and gone by then).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let moved_before = error_count(source, "MOVED");
    for port in [target, source] {
        ok(
            port,
            &["cluster", "setslot", &slot_text, "node", &target_id],
        );
    }
    let stored = redis_cli(target, &["hget", &key, "INTERAC:RTP:GIGADAT"]);
    assert_eq!(stored.trim(), "1", "the refused write was applied");
    let recorded = app.success(customer, "GIGADAT").await;
    assert_eq!((recorded.result, recorded.net_count), (APPLIED, 2));
    assert!(
        error_count(source, "MOVED") > moved_before,
        "the old owner answered no MOVED: the test did not exercise it"
    );
    let pin = app.pin(pin_request(customer, &[])).await.unwrap();
    assert_eq!((pin.connector.as_str(), pin.pinned), ("GIGADAT", true));
}

/// How many `code` errors `port` has replied since it started.
fn error_count(port: u16, code: &str) -> u64 {
    redis_cli(port, &["info", "errorstats"])
        .lines()
        .find_map(|line| line.strip_prefix(&format!("errorstat_{code}:count=")))
        .map_or(0, |count| count.trim().parse().unwrap())
}
