//! The memory guard for admission against a real `redis-server`: a node at
//! or above the limit refuses new customers within 3 s and admits them again
//! within 3 s of falling below; existing customers and GetPin never notice;
//! `/metrics` shows it per node; on Cluster the shard of the new key decides.

use std::future::Future;
use std::time::{Duration, Instant};

use fred::prelude::{HashesInterface, KeysInterface};
use fred::util::redis_keyslot;
use sticky_routing::config::Settings;
use sticky_routing::domain::memory_guard::MemoryLimit;
use sticky_routing::domain::percent::Percent;

use crate::support::*;
use test_support::redis_cluster::owned_slots;
use test_support::redis_server::redis_cli;

/// What the contract allows between `used_memory` crossing the limit and
/// new customers being refused (or admitted again).
const WITHIN: Duration = Duration::from_secs(3);

fn share(percent: f64) -> MemoryLimit {
    MemoryLimit::OfMaxmemory(Percent::new(percent).unwrap())
}

fn limited(limit: MemoryLimit) -> impl FnOnce(&mut Settings) {
    move |settings| {
        settings.rules.admission_memory_limit = limit;
        // Under a loaded test machine, do not let the 250ms default fail a call.
        settings.redis.command_timeout = Duration::from_secs(5);
    }
}

/// A field of `INFO memory` on the node at `port`.
fn info_memory(port: u16, field: &str) -> u64 {
    let info = redis_cli(port, &["info", "memory"]);
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .parse()
        .unwrap()
}

fn set_maxmemory(port: u16, bytes: u64) {
    let reply = redis_cli(port, &["config", "set", "maxmemory", &bytes.to_string()]);
    assert_eq!(reply.trim(), "OK");
}

/// Calls `probe` every 50 ms until it holds; how long that took, which
/// must be within `within`.
async fn until<F, Fut>(within: Duration, what: &str, mut probe: F) -> Duration
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    for attempt in 0.. {
        if probe(attempt).await {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{what} not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

/// The result of a first success for `customer` of merchant `m1`.
async fn first_success(app: &TestApp, customer: &str) -> i32 {
    app.success(customer, "GIGADAT").await.result
}

/// The guard's gauge for the node on `port`, from `/metrics`.
async fn engaged_gauge(app: &TestApp, port: u16) -> Option<u8> {
    let text = app.scrape().await;
    let needle = format!(":{port}\"}} ");
    text.lines()
        .filter(|line| line.starts_with("sticky_routing_admission_memory_guard_engaged{"))
        .find_map(|line| line.split_once(&needle)?.1.parse().ok())
}

#[tokio::test]
async fn a_node_at_its_limit_refuses_new_customers_only_and_admits_again_below_it() {
    let app = spawn_app_with(limited(share(50.0))).await;
    let port = app.redis.data_ports()[0];
    assert_eq!(first_success(&app, "existing").await, APPLIED);
    assert_eq!(engaged_gauge(&app, port).await, Some(0), "clear at start");

    // used_memory is now at 62.5 % of maxmemory: over a 50 % limit, yet
    // below maxmemory, so Redis itself still takes every write.
    set_maxmemory(port, info_memory(port, "used_memory") * 8 / 5);
    let refused = until(WITHIN, "a new customer refused", |i| {
        let app = &app;
        async move { first_success(app, &format!("new{i}")).await == NOT_ADMITTED }
    })
    .await;
    println!("refused {refused:?} after the limit was crossed");

    // A refused customer writes nothing and spends none of the budget.
    let budget_before: Option<i64> = app.inspect.hget("sticky_adm_m1", "cur").await.unwrap();
    assert_eq!(first_success(&app, "refused").await, NOT_ADMITTED);
    assert!(
        !app.customer_keys()
            .await
            .contains(&"sticky_gw_m1_refused".to_owned())
    );
    let budget_after: Option<i64> = app.inspect.hget("sticky_adm_m1", "cur").await.unwrap();
    assert_eq!(budget_before, budget_after);
    // Both refusals (the one that showed the guard engaged, and this one)
    // are counted as the guard's, none as the budget's.
    let text = app.scrape().await;
    let refusals = |reason: &str| {
        let series = format!("sticky_routing_admission_refusals_total{{reason=\"{reason}\"}}");
        sample(&text, &series)
    };
    assert_eq!(refusals("memory_guard"), Some(2.0), "{text}");
    assert_eq!(refusals("budget"), None, "{text}");

    // Existing customers keep updating, and GetPin does not notice.
    let update = app.success("existing", "GIGADAT").await;
    assert_eq!((update.result, update.net_count), (APPLIED, 2));
    assert_eq!(app.failure("existing", "GIGADAT").await.result, APPLIED);
    let pin = app
        .pin(pin_request("existing", &["GIGADAT"]))
        .await
        .unwrap();
    assert_eq!((pin.pinned, pin.connector.as_str()), (true, "GIGADAT"));
    assert_eq!(engaged_gauge(&app, port).await, Some(1));

    // used_memory at a quarter of maxmemory: below the limit again.
    set_maxmemory(port, info_memory(port, "used_memory") * 4);
    let admitted = until(WITHIN, "a new customer admitted again", |i| {
        let app = &app;
        async move { first_success(app, &format!("again{i}")).await == APPLIED }
    })
    .await;
    println!("admitted {admitted:?} after falling below the limit");
    assert_eq!(engaged_gauge(&app, port).await, Some(0));
    app.assert_every_key_has_a_ttl().await;
}

#[tokio::test]
async fn a_byte_limit_is_reached_by_filling_memory_whatever_maxmemory_says() {
    // A percentage would mean no limit here: this Redis has no maxmemory.
    let redis = RedisServer::start();
    let port = redis.port;
    let limit = MemoryLimit::Bytes(info_memory(port, "used_memory") + 2_000_000);
    let app = spawn_app_against(
        TestRedis::Single(redis),
        format!("redis://127.0.0.1:{port}"),
        limited(limit),
    )
    .await;
    assert_eq!(info_memory(port, "maxmemory"), 0);
    assert_eq!(first_success(&app, "existing").await, APPLIED);

    let filler = "x".repeat(4_000_000);
    let _: () = app
        .inspect
        .set("filler", filler.as_str(), None, None, false)
        .await
        .unwrap();
    until(WITHIN, "a new customer refused", |i| {
        let app = &app;
        async move { first_success(app, &format!("new{i}")).await == NOT_ADMITTED }
    })
    .await;
    assert_eq!(app.success("existing", "GIGADAT").await.result, APPLIED);

    let _: i64 = app.inspect.del("filler").await.unwrap();
    until(WITHIN, "a new customer admitted again", |i| {
        let app = &app;
        async move { first_success(app, &format!("again{i}")).await == APPLIED }
    })
    .await;
}

#[tokio::test]
async fn a_percentage_without_maxmemory_is_no_limit_and_polls_once_a_second() {
    let app = spawn_app_with(limited(share(1.0))).await;
    let port = app.redis.data_ports()[0];
    assert_eq!(info_memory(port, "maxmemory"), 0);
    let info_calls = || {
        let stats = redis_cli(port, &["info", "commandstats"]);
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_info:calls=")?.split(',').next())
            .map_or(0, |calls| calls.parse::<u64>().unwrap())
    };

    let before = info_calls();
    let window = Instant::now();
    for i in 0..10 {
        assert_eq!(first_success(&app, &format!("c{i}")).await, APPLIED);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let seconds = window.elapsed().as_secs_f64();
    // Less our own first INFO commandstats, which the second one counts.
    let polls = info_calls() - before - 1;
    println!("{polls} polls in {seconds:.1} s");
    assert!(
        (polls as f64) <= seconds.floor() + 1.0 && polls as f64 >= seconds.floor() - 1.0,
        "{polls} polls in {seconds:.1} s: about one a second, never more"
    );

    let text = app.scrape().await;
    assert_eq!(engaged_gauge(&app, port).await, Some(0), "{text}");
    assert!(
        !text.contains("sticky_routing_admission_memory_limit_bytes{"),
        "no limit, so none shown:\n{text}"
    );
    assert!(
        text.contains("sticky_routing_admission_memory_used_bytes{"),
        "{text}"
    );
}

#[tokio::test]
async fn on_cluster_the_shard_that_would_hold_the_new_key_decides() {
    let app = spawn_app_on(Topology::Cluster, limited(share(50.0))).await;
    let primaries = app.redis.data_ports();
    let full = primaries[0];
    let slots = owned_slots(full);
    let on_full = |customer: &str| {
        let slot = redis_keyslot(format!("sticky_gw_m1_{customer}").as_bytes());
        slots.iter().any(|range| range.contains(&slot))
    };
    let customers = |full_shard: bool, prefix: &'static str| {
        (0..)
            .map(move |i| format!("{prefix}{i}"))
            .filter(move |c| on_full(c) == full_shard)
    };
    let existing = customers(true, "existing").next().unwrap();
    assert_eq!(first_success(&app, &existing).await, APPLIED);

    set_maxmemory(full, info_memory(full, "used_memory") * 8 / 5);
    let mut refused_here = customers(true, "new");
    until(WITHIN, "a new customer on the full shard refused", |_| {
        let customer = refused_here.next().unwrap();
        let app = &app;
        async move { first_success(app, &customer).await == NOT_ADMITTED }
    })
    .await;
    assert_eq!(engaged_gauge(&app, full).await, Some(1));
    for other in &primaries[1..] {
        assert_eq!(engaged_gauge(&app, *other).await, Some(0), "{other}");
    }

    for customer in customers(false, "elsewhere").take(5) {
        assert_eq!(
            first_success(&app, &customer).await,
            APPLIED,
            "{customer} lives on a shard below its limit"
        );
    }
    let update = app.success(&existing, "GIGADAT").await;
    assert_eq!((update.result, update.net_count), (APPLIED, 2));
    let pin = app.pin(pin_request(&existing, &["GIGADAT"])).await.unwrap();
    assert!(pin.pinned);
}

/// The service's binary against the Redis on `port`, logging at `info`.
fn binary(port: u16, limit: &str) -> tokio::process::Command {
    let mut command = service_binary(&[
        (
            "STICKY_ROUTING_LISTEN_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
        (
            "STICKY_ROUTING_METRICS_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
        (
            "STICKY_ROUTING_REDIS_URL",
            format!("redis://127.0.0.1:{port}"),
        ),
        ("STICKY_ROUTING_REDIS_USERNAME", SERVICE_USER.into()),
        ("STICKY_ROUTING_REDIS_PASSWORD", SERVICE_PASSWORD.into()),
        ("STICKY_ROUTING_REDIS_POOL_SIZE", "1".into()),
        ("STICKY_ROUTING_ADMISSION_MEMORY_LIMIT", limit.into()),
    ]);
    command
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    command
}

#[tokio::test]
async fn a_bad_memory_limit_stops_the_binary_with_status_2_naming_it() {
    for bad in ["0%", "100.5%", "5TB", "1.5GB", "80 %", "-1"] {
        let output = binary(free_port(), bad).output();
        let output = tokio::time::timeout(Duration::from_secs(10), output)
            .await
            .expect("the binary hung")
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains("STICKY_ROUTING_ADMISSION_MEMORY_LIMIT"),
            "{bad}: {stderr}"
        );
    }
}

#[tokio::test]
async fn the_log_says_once_when_there_is_no_limit_and_when_the_guard_engages_and_releases() {
    let redis = RedisServer::start();
    let port = redis.port;
    let child = binary(port, "80%").spawn().unwrap();
    // Two polls or more with no maxmemory, then engaged, then released.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    set_maxmemory(port, info_memory(port, "used_memory") * 6 / 5);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    set_maxmemory(port, info_memory(port, "used_memory") * 4);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    test_support::signal::send_to_child(&child, "-TERM");
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("the binary did not stop")
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    for (line, times) in [
        ("has no maxmemory", 1),
        ("memory guard engaged", 1),
        ("memory guard released", 1),
    ] {
        assert_eq!(log.matches(line).count(), times, "`{line}` in:\n{log}");
    }
    let engaged = log
        .lines()
        .find(|l| l.contains("memory guard engaged"))
        .unwrap();
    assert!(engaged.contains(&format!("127.0.0.1:{port}")), "{engaged}");
}
